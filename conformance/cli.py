"""The `session-lineage` command: `check` a target, `gate` a release on two reports, `serve` the reference server, render `docs`, `bundle` the spec."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack

from conformance import SUITE_VERSION
from conformance.config import Config, ConfigError, load
from conformance.results import EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments[:1] == ["serve"]:
        from conformance.embedded import serve_main

        return serve_main(arguments[1:])
    parser = _parser()
    try:
        args = parser.parse_args(arguments)
    except SystemExit as exc:  # --help, --version (0) or a usage error (2, printed in one line)
        return int(exc.code or 0)
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.handler(args))
    except ConfigError as exc:
        print(f"session-lineage: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors in one line (and exit 2), like every other set-up error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="session-lineage", description="Session Lineage spec tools: conformance suite and reference server."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {SUITE_VERSION}")
    commands = parser.add_subparsers(dest="command")

    check = commands.add_parser("check", help="run the conformance suite against a target")
    where = check.add_mutually_exclusive_group()
    where.add_argument("--target", help="base URL of the server under test (env SESSION_LINEAGE_TARGET)")
    where.add_argument("--embedded", action="store_true", help="start the reference server (a child process) on a temporary SQLite database")
    check.add_argument("--embedded-database-url", help="with --embedded: a database for it instead of a temporary SQLite file")
    check.add_argument("--config", help="YAML configuration file (env SESSION_LINEAGE_CONFIG)")
    check.add_argument("--token", action="append", dest="tokens", help="bearer token of one principal; give two or more")
    check.add_argument("--strict", action="store_true", default=None, help="SHOULD failures gate too")
    check.add_argument("--seed", type=int, help="replay a run's random choices")
    check.add_argument(
        "--depth", choices=("quick", "deep"),
        help="run depth: quick (default; every check, few generated cases) or deep (nightly: many more generated cases)",
    )
    check.add_argument("--select", action="append", help="run checks whose name or requirement ID starts with this")
    check.add_argument("--expected-failures", help="the target's expected-failures YAML file")
    check.add_argument("--report-json", help="write the JSON report here")
    check.add_argument("--junit", help="write JUnit XML here")
    check.add_argument("--markdown", help="append the Markdown summary to this file (e.g. $GITHUB_STEP_SUMMARY)")
    check.add_argument("--html", help="write a self-contained HTML report here")
    check.add_argument(
        "--spec-url", metavar="URL",
        help="with --html: link every requirement id to URL#ID (the rendered spec, e.g. spec/site/index.html where you publish it)",
    )
    check.add_argument(
        "--profile",
        help="the profile the target claims, NAME or NAME@VERSION, e.g. core or full@1.1.0 "
        "(env SESSION_LINEAGE_PROFILE; default: the capability document's conformance_claim, else full)",
    )
    check.add_argument(
        "--skip-preflight",
        metavar="NAME[,NAME]",
        help="preflight items not to run: reachable, capabilities, tokens, principals, roles, replicas, reports, expected-failures, counts",
    )
    check.add_argument(
        "--otlp-receiver", metavar="[HOST:]PORT",
        help="receive the target's OTLP/HTTP traces here and count round trips from its database client spans, "
        "for a target that advertises diagnostics.trace-context (env SESSION_LINEAGE_OTLP_RECEIVER)",
    )
    check.add_argument(
        "--keep", action="store_true", default=None,
        help="keep everything the suite creates (by default it is purged at the end when the target offers purge)",
    )
    check.add_argument(
        "--serial", action="store_const", const=False, dest="parallel",
        help="run every check in this process, one at a time (by default two more processes run the Schemathesis "
        "checks beside the others, then share the rest of the queue; env SESSION_LINEAGE_PARALLEL=false)",
    )
    check.add_argument("--list", action="store_true", help="list the checks and their requirement IDs, then exit")
    check.add_argument("--quiet", action="store_true", help="no progress display")
    check.set_defaults(handler=_check)

    # `serve` is the reference server's own command line (reference_impl/cli.py): `main` hands it the
    # arguments before this parser sees them; listed here for `--help`.
    commands.add_parser("serve", help="run the reference server", add_help=False)

    docs = commands.add_parser("docs", help="regenerate spec/REQUIREMENTS.md and spec/site/index.html from the spec")
    docs.add_argument("--check", action="store_true", help="exit 1 if the file is stale instead of writing it")
    docs.set_defaults(handler=_docs)

    gate = commands.add_parser(
        "gate", help="compare two JSON reports: fail when a requirement that passed in the baseline does not pass now"
    )
    gate.add_argument("--baseline", required=True, help="JSON report of the last accepted run (check --report-json)")
    gate.add_argument("--candidate", required=True, help="JSON report of the run to gate")
    gate.add_argument("--markdown", help="also append the Markdown comparison to this file (e.g. $GITHUB_STEP_SUMMARY)")
    gate.add_argument(
        "--require-version", metavar="X.Y[.Z]",
        help="fail unless the candidate's claim is at this spec version or a later minor version of the same major",
    )
    gate.add_argument("--strict", action="store_true", default=None,
                      help="evidence lost (pass -> not verified) fails the gate too (default: SESSION_LINEAGE_STRICT)")
    gate.set_defaults(handler=_gate)

    imports = commands.add_parser(
        "import", help="import a legacy JSONL history (and, found beside it, the histories it was forked from)"
    )
    imports.add_argument("file", help="the legacy .jsonl history")
    imports.add_argument("--target", required=True, help="base URL of a server that advertises legacy-import")
    imports.add_argument("--token", required=True, help="bearer token of the principal that will own the sessions")
    imports.add_argument("--writer-lease", help="the lease held on the history's session, when continuing an import")
    imports.add_argument(
        "--jsonl", action="store_true",
        help="print one import summary per line (JSON Lines) instead of one JSON array; errors go to stderr",
    )
    imports.set_defaults(handler=_import)

    bundle = commands.add_parser("bundle", help="regenerate spec/openapi.bundled.yaml (every schema inlined)")
    bundle.add_argument("--check", action="store_true", help="exit 1 if the file is stale instead of writing it")
    bundle.set_defaults(handler=_bundle)
    return parser


def _load_suite() -> None:
    """Import what a run uses (every check module among it) and read the spec's documents: done
    while the embedded server starts, this takes about half a second off the run."""
    import conformance.cleanup  # noqa: F401
    import conformance.preflight  # noqa: F401
    import conformance.reports.console  # noqa: F401
    import conformance.reports.html_report  # noqa: F401
    import conformance.progress  # noqa: F401
    import conformance.runner  # noqa: F401
    import spec
    from conformance.registry import all_checks

    all_checks()
    spec.openapi()
    spec.requirements()
    spec.profiles()


def _check(args: argparse.Namespace) -> int:
    from conformance.registry import all_checks, select

    if args.embedded_database_url and not args.embedded:
        raise ConfigError("--embedded-database-url needs --embedded")
    if args.list:
        return _list_checks(all_checks())

    from conformance.reports.terminal import make_console

    console = make_console()
    _check_spec_url(args)
    with ExitStack() as stack:
        overrides = {
            "strict": args.strict,
            "seed": args.seed,
            "select": args.select,
            "expected_failures": args.expected_failures,
            "target": args.target,
            "tokens": args.tokens,
            "profile": args.profile,
            "keep": args.keep,
            "depth": args.depth,
            "skip_preflight": args.skip_preflight,
            "otlp_receiver": args.otlp_receiver,
            "parallel": args.parallel,
        }
        # The settings as far as they are known before the target is (the embedded server's URL and
        # tokens come once it has started): they decide what starts first.
        plan = load(args.config, {"target": "http://embedded.invalid", "tokens": ["embedded-1", "embedded-2"],
                                  **{key: value for key, value in overrides.items() if value is not None}})
        if plan.parallel and not plan.select:  # a whole run: its lanes load the checks meanwhile
            from conformance import lanes

            lanes.start_early()
            stack.callback(lanes.stop_early)  # ended at exit when no run took them
        if args.embedded:
            from conformance.embedded import embedded_log, reference_process

            where = args.embedded_database_url.split("://")[0] if args.embedded_database_url else "SQLite"
            log = embedded_log()
            console.print(f"[dim]starting the embedded reference server ({where}; its log: {log})…[/dim]", highlight=False)
            traced = _embedded_trace_endpoint(plan)
            server = stack.enter_context(
                reference_process(args.embedded_database_url, log_file=log, otlp_endpoint=traced, while_starting=_load_suite)
            )
            overrides.update(target=server.url, tokens=list(server.tokens))
        from conformance.cleanup import verify_by_listing
        from conformance.preflight import run_preflight
        from conformance.reports import render_console, render_preflight
        from conformance.progress import ProgressDisplay
        from conformance.runner import run

        config = load(args.config, overrides)
        reports = _report_paths(args)
        checks = all_checks()
        selected = select(checks, config.select)
        if not selected:
            raise ConfigError(f"no check matches --select {', '.join(config.select)}")
        console.print(
            f"session-lineage conformance {SUITE_VERSION} → {config.target}  "
            f"seed {config.seed}  ids {config.id_prefix}*  {len(selected)} checks  depth {config.depth}",
            highlight=False,
        )
        preflight = run_preflight(config, [(what, path) for what, path, _ in reports], [c.name for c in checks], selected)
        render_preflight(preflight.items, console)
        if not preflight.ok:
            return EXIT_USAGE
        display = ProgressDisplay(console, len(selected), enabled=not args.quiet, checks=selected)
        with display:
            result = run(
                config,
                progress=display.update,
                capabilities=preflight.capabilities,
                preflight=preflight.items,
                created=preflight.created,
                expected=preflight.expected,
            )
        result.cleanup = verify_by_listing(
            result.cleanup, config.target, config.tokens, (result.capabilities or {}).get("capabilities", []), config.timeout
        )
    render_console(result, console)
    for what, path, writer in reports:
        try:
            writer(result, path)
        except OSError as exc:  # preflight found it writable; it changed during the run
            console.print(f"[bold red]could not write the {what} to {path}: {exc.strerror or exc}[/bold red]")
            return EXIT_USAGE
        console.print(f"[dim]wrote {path}[/dim]", highlight=False)
    return result.exit_code


def _embedded_trace_endpoint(placeholder: Config) -> str | None:
    """Where the embedded reference exports its spans: the run's receiver, started first so that a
    port 0 setting has its real port (a port that cannot be bound is left to preflight to report)."""
    if placeholder.otlp_receiver is None:
        return None
    from conformance import otlp
    from conformance.embedded import trace_endpoint

    try:
        otlp.start(placeholder)
    except OSError:
        return None
    return trace_endpoint(placeholder)


def _check_spec_url(args: argparse.Namespace) -> None:
    if args.spec_url is not None and not args.spec_url.startswith(("http://", "https://", "file://")):
        raise ConfigError(f"--spec-url {args.spec_url!r} is not an http://, https:// or file:// URL")


def _report_paths(args: argparse.Namespace) -> list[tuple[str, str, Callable[..., None]]]:
    from conformance.reports import write_html, write_json, write_junit, write_markdown

    html = functools.partial(write_html, spec_url=args.spec_url) if args.spec_url else write_html
    wanted = (
        ("JSON report", args.report_json, write_json),
        ("JUnit report", args.junit, write_junit),
        ("Markdown summary", args.markdown, write_markdown),
        ("HTML report", args.html, html),
    )
    return [(what, path, writer) for what, path, writer in wanted if path]


def _list_checks(checks: list) -> int:
    """Print every check; a reader that stops early (`| head`) ends the listing quietly."""
    try:
        for item in checks:
            sys.stdout.write(f"{item.name:55} {' '.join(item.requirements)}\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit; point it at /dev/null so that flush cannot fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0


def _docs(args: argparse.Namespace) -> int:
    from conformance.docs import REQUIREMENTS_MD, render_requirements
    from conformance.spec_site import SITE_HTML, render_site

    stale = 0
    for path, text in ((REQUIREMENTS_MD, render_requirements()), (SITE_HTML, render_site())):
        if args.check:
            current = path.read_text(encoding="utf-8") if path.exists() else ""
            if current != text:
                print(f"{path} is stale: run `session-lineage docs`", file=sys.stderr)
                stale = 1
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return stale


def _gate(args: argparse.Namespace) -> int:
    from conformance.gate import run_gate

    return run_gate(args.baseline, args.candidate, markdown=args.markdown, require_version=args.require_version,
                    strict=args.strict)


def _import(args: argparse.Namespace) -> int:
    from conformance.legacy_import import run as run_import

    return run_import(args.file, args.target, args.token, args.writer_lease, jsonl=args.jsonl)


def _bundle(args: argparse.Namespace) -> int:
    from spec.bundle import BUNDLED_PATH, bundle, render

    text = render(bundle())
    if args.check:
        current = BUNDLED_PATH.read_text(encoding="utf-8") if BUNDLED_PATH.exists() else ""
        if current != text:
            print(f"{BUNDLED_PATH} is stale: run `session-lineage bundle`", file=sys.stderr)
            return 1
        return 0
    BUNDLED_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {BUNDLED_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
