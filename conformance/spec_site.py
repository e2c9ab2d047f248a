"""Renders spec/site/index.html: the requirements catalogue, the OpenAPI reference, the problem
types and the checks on one self-contained page.

Reviewers read the spec as the design's source of truth; this page puts the rules, the checks
that verify each rule, the operations they govern and the problem types each operation answers
side by side, with links both ways. It is generated from the same data as REQUIREMENTS.md
(`session-lineage docs`) and kept fresh by a test. The page loads nothing: Mermaid diagrams are
rendered to SVG at build time by beautiful-mermaid (spec/site/tools, Node.js) and inlined; each SVG
is kept in spec/site/diagrams/ under the hash of its source, so only a new or changed diagram needs
Node.js to build the page.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # not on Windows: installs there are not serialised
    fcntl = None  # type: ignore[assignment]

from markdown_it import MarkdownIt

import spec
from conformance.docs import render_requirements
from conformance.registry import all_checks

SITE_HTML = spec.SPEC_DIR / "site" / "index.html"
DIAGRAMS_DIR = spec.SPEC_DIR / "site" / "diagrams"
TOOLS_DIR = spec.SPEC_DIR / "site" / "tools"
METHODS = ("get", "post", "put", "patch", "delete")
REQUIREMENT_ID = re.compile(r"\b[A-Z]+(?:-[A-Z0-9]+)*-\d{3}\b")

STYLE = """
body{font:15px/1.5 system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#1d2329;background:#fff}
nav{position:fixed;top:0;bottom:0;left:0;width:250px;overflow:auto;padding:1em;background:#f4f6f8;border-right:1px solid #dde2e6;font-size:13px}
nav a{display:block;color:#1d4f91;text-decoration:none;padding:1px 0}
main{margin-left:290px;max-width:980px;padding:1em 2em 4em}
h1,h2,h3{line-height:1.25}h2{border-bottom:1px solid #dde2e6;padding-bottom:.2em;margin-top:2em}
h3{font-size:1.05em;margin-top:1.6em}
table{border-collapse:collapse;margin:.8em 0;font-size:14px}td,th{border:1px solid #dde2e6;padding:.3em .6em;vertical-align:top}
th{background:#f4f6f8;text-align:left}code{background:#f4f6f8;padding:0 .25em;border-radius:3px;font-size:92%}
pre{background:#f4f6f8;padding:.8em;overflow:auto;border-radius:4px;font-size:13px}
.op{border:1px solid #dde2e6;border-radius:6px;padding:.2em 1em .8em;margin:1em 0}
.method{display:inline-block;min-width:4.5em;font-weight:600;text-transform:uppercase;color:#fff;background:#1d4f91;border-radius:3px;padding:0 .4em;text-align:center}
.method.get{background:#2f7d32}.method.delete{background:#b3261e}.method.patch{background:#8a5a00}
.muted{color:#5b6670}.diagram{overflow:auto;margin:1em 0}.diagram svg{max-width:100%;height:auto}
"""


class DiagramMissing(RuntimeError):
    """A diagram has no SVG in spec/site/diagrams and Node.js cannot render one here."""


def render_site() -> str:
    """The whole page; deterministic, so a test can compare it with the committed file."""
    markdown = _markdown()
    markdown.add_render_rule("fence", _fence)
    document = spec.openapi()
    catalogue = markdown.render(_link_catalogue(render_requirements()))
    body = [
        '<!doctype html><html lang="en"><head><meta charset="utf-8">',
        f"<title>Session Lineage {html.escape(spec.spec_version())}</title>",
        f"<style>{STYLE}</style></head><body>",
        _navigation(document),
        "<main>",
        catalogue,
        '<h1 id="api">API reference</h1>',
        f"<p class='muted'>From <code>openapi.yaml</code> (OpenAPI {html.escape(document['openapi'])}); "
        "each operation lists the requirements that govern it and the problem types it can answer "
        "(<code>x-problem-types</code>). Code generators should read <code>openapi.bundled.yaml</code>.</p>",
        *_operations(document),
        '<h1 id="problem-types">Problem types</h1>',
        "<p class='muted'>From <code>problem-types.yaml</code>: every error answer is an RFC 9457 problem "
        "whose <code>type</code> is <code>urn:session-lineage:problem:</code> and the kind.</p>",
        *_problem_types(document),
        '<h1 id="checks">Checks</h1>',
        "<p class='muted'>Every check of the conformance suite and the requirements it verifies.</p>",
        *_checks(),
        "</main>",
        "</body></html>",
    ]
    return "\n".join(body) + "\n"


# ------------------------------------------------------------------------------ Markdown


def _markdown() -> MarkdownIt:
    markdown = MarkdownIt("commonmark", {"html": True}).enable("table")
    markdown.core.ruler.push("heading_ids", _heading_ids)
    return markdown


def _inline(text: str) -> str:
    """Markdown of a description or summary, as HTML inside a paragraph or table cell."""
    return _markdown().renderInline(" ".join(str(text).split()))


def slug(title: str) -> str:
    """The anchor of a heading, as GitHub and REQUIREMENTS.md's table of contents make it."""
    return "".join(ch for ch in title.lower().replace(" ", "-") if ch.isalnum() or ch == "-")


def _heading_ids(state: Any) -> None:
    """Give every heading an id, the slug of its text as GitHub makes it (a requirement is also
    reachable by its bare ID, an anchor placed before its heading)."""
    seen: dict[str, int] = {}
    tokens = state.tokens
    for index, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        anchor = slug(tokens[index + 1].content)
        seen[anchor] = seen.get(anchor, 0) + 1
        token.attrSet("id", anchor if seen[anchor] == 1 else f"{anchor}-{seen[anchor] - 1}")


def _fence(renderer: Any, tokens: Any, index: int, options: Any, env: Any) -> str:
    token = tokens[index]
    if token.info.strip() == "mermaid":
        return f'<div class="diagram">{diagram_svg(token.content)}</div>\n'
    return f"<pre><code>{html.escape(token.content)}</code></pre>\n"


def _link_catalogue(text: str) -> str:
    """Link, in the catalogue: the checks of each rule, the operations it names, and every
    requirement ID a rule's text cites."""
    operations = set(_all_operation_ids())
    lines = []
    for line in text.splitlines():
        if line.startswith("### ") and ":" in line:
            lines += [f'<a id="{html.escape(line[4:].split(":", 1)[0])}"></a>', ""]
        if line.startswith("Checked by: `"):
            names = [name.strip().strip("`") for name in line[len("Checked by: "):].split(",")]
            line = "Checked by: " + ", ".join(f"[`{name}`](#check-{name})" for name in names)
        elif not line.startswith("#"):
            line = re.sub(r"`(\w+)`", lambda m: f"[`{m.group(1)}`](#op-{m.group(1)})" if m.group(1) in operations else m.group(0), line)
            line = _link_requirement_ids(line)
        lines.append(line)
    return "\n".join(lines)


def _link_requirement_ids(line: str) -> str:
    known = {req["id"] for req in spec.requirements()}
    parts = re.split(r"(`[^`]*`|\[[^\]]*\]\([^)]*\))", line)  # leave code spans and links alone
    for number, part in enumerate(parts):
        if number % 2 == 0:
            parts[number] = REQUIREMENT_ID.sub(lambda m: f"[{m.group(0)}](#{m.group(0)})" if m.group(0) in known else m.group(0), part)
    return "".join(parts)


# ------------------------------------------------------------------------------ diagrams


def diagram_svg(source: str) -> str:
    """The diagram as inline SVG: from spec/site/diagrams, rendered there first when missing."""
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]
    path = DIAGRAMS_DIR / f"{digest}.svg"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_render_with_node(source), encoding="utf-8")
    svg = path.read_text(encoding="utf-8")
    svg = re.sub(r"@import url\([^)]*\);?", "", svg)  # web fonts: the page loads nothing
    prefix = f"d{digest[:8]}-"  # ids unique across the page's diagrams
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}{m.group(1)})", svg)
    svg = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{prefix}{m.group(1)}"', svg)
    return svg.replace("<svg ", '<svg role="img" ', 1)


def install_tools(npm: str, marker: Path) -> subprocess.CompletedProcess[bytes] | None:
    """`npm ci` in spec/site/tools unless `marker` (a file the install writes) is there already;
    None when it was. Two processes never install at once: `npm ci` first empties node_modules, so
    an install beside another one removes what the other is writing (two test workers that each
    needed the tools both failed so). The second waits on a lock file and finds the tools there."""
    if marker.exists():
        return None
    with open(TOOLS_DIR / ".npm-ci.lock", "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if marker.exists():
            return None
        return subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=TOOLS_DIR, capture_output=True, timeout=300)


def _render_with_node(source: str) -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise DiagramMissing(
            "a Mermaid diagram has no SVG in spec/site/diagrams; rendering it needs Node.js and npm "
            "(Debian packages nodejs and npm), then run `session-lineage docs` again"
        )
    installed = install_tools(npm, TOOLS_DIR / "node_modules" / "beautiful-mermaid")
    if installed is not None and installed.returncode != 0:
        raise DiagramMissing(f"npm ci could not install beautiful-mermaid: {installed.stderr.decode(errors='replace')[-500:]}")
    done = subprocess.run(
        [node, "render-mermaid.mjs"], cwd=TOOLS_DIR, input=source.encode("utf-8"), capture_output=True, check=False
    )
    if done.returncode != 0 or not done.stdout.startswith(b"<svg"):
        raise DiagramMissing(f"beautiful-mermaid could not render a diagram: {done.stderr.decode(errors='replace')[:500]}")
    return done.stdout.decode("utf-8")


# ------------------------------------------------------------------------------ API reference


def _all_operation_ids() -> list[str]:
    return [op["operationId"] for item in spec.openapi()["paths"].values() for method, op in item.items() if method in METHODS]


def _requirements_by_operation() -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    all_ops = _all_operation_ids()
    for req in spec.requirements():
        operations = req.get("operations", [])
        for operation_id in all_ops if operations == "all" else operations:
            found.setdefault(operation_id, []).append(req)
    return found


def _navigation(document: dict[str, Any]) -> str:
    catalogue = spec.load_yaml(spec.REQUIREMENTS_PATH)
    links = ['<nav><strong><a href="#capabilities">Requirements</a></strong>']
    for chapter in catalogue["chapters"]:
        links.append(f'<a href="#{slug(chapter["title"])}">{html.escape(chapter["title"])}</a>')
    links.append('<br><strong><a href="#api">API reference</a></strong>')
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                links.append(f'<a href="#op-{operation["operationId"]}">{method.upper()} {html.escape(path)}</a>')
    links.append('<br><strong><a href="#problem-types">Problem types</a></strong>')
    links.append('<strong><a href="#checks">Checks</a></strong></nav>')
    return "\n".join(links)


def _kind_status() -> dict[str, int]:
    return {entry["kind"]: entry["status"] for entry in spec.problem_types().values()}


def _operations(document: dict[str, Any]) -> list[str]:
    governing = _requirements_by_operation()
    statuses = _kind_status()
    out: list[str] = []
    for path, item in document["paths"].items():
        shared = item.get("parameters", [])
        for method, operation in item.items():
            if method not in METHODS:
                continue
            op_id = operation["operationId"]
            kinds = operation.get("x-problem-types", [])
            out.append(f'<div class="op" id="op-{op_id}">')
            out.append(
                f'<h3 id="op-{op_id}-title"><span class="method {method}">{method}</span> <code>{html.escape(path)}</code> '
                f"<span class='muted'>{html.escape(op_id)}</span></h3>"
            )
            out.append(f"<p>{_inline(operation.get('summary', ''))}</p>")
            parameters = [_resolve(document, p) for p in [*shared, *operation.get("parameters", [])]]
            if parameters:
                out.append("<table><tr><th>parameter</th><th>in</th><th>required</th><th>description</th></tr>")
                for parameter in parameters:
                    out.append(
                        f"<tr><td><code>{html.escape(parameter['name'])}</code></td><td>{parameter['in']}</td>"
                        f"<td>{'yes' if parameter.get('required') else 'no'}</td>"
                        f"<td>{_inline(parameter.get('description', ''))}</td></tr>"
                    )
                out.append("</table>")
            request = operation.get("requestBody", {}).get("content", {})
            for media_type, content in request.items():
                out.append(f"<p>Request body <code>{html.escape(media_type)}</code>: {_schema_name(content.get('schema', {}))}</p>")
            out.append("<table><tr><th>status</th><th>answer</th><th>problem types</th><th>body</th></tr>")
            for status, response in operation.get("responses", {}).items():
                response = _resolve(document, response)
                bodies = ", ".join(
                    f"<code>{html.escape(media)}</code> {_schema_name(c.get('schema', {}))}"
                    for media, c in response.get("content", {}).items()
                )
                answered = ", ".join(
                    f'<a href="#problem-{kind}"><code>{html.escape(kind)}</code></a>'
                    for kind in kinds
                    if str(statuses.get(kind)) == str(status)
                )
                out.append(
                    f"<tr><td>{html.escape(str(status))}</td><td>{_inline(response.get('description', ''))}</td>"
                    f"<td>{answered}</td><td>{bodies}</td></tr>"
                )
            out.append("</table>")
            rules = governing.get(op_id, [])
            if rules:
                links = ", ".join(f'<a href="#{r["id"]}">{html.escape(r["id"])}</a>' for r in rules)
                out.append(f"<p>Requirements: {links}</p>")
            out.append("</div>")
    return out


def _problem_types(document: dict[str, Any]) -> list[str]:
    answering: dict[str, list[str]] = {}
    for item in document["paths"].values():
        for method, operation in item.items():
            if method in METHODS:
                for kind in operation.get("x-problem-types", []):
                    answering.setdefault(kind, []).append(operation["operationId"])
    out = ["<table><tr><th>kind</th><th>status</th><th>title</th><th>operations that can answer it</th></tr>"]
    for uri, entry in spec.problem_types().items():
        kind = entry["kind"]
        operations = ", ".join(f'<a href="#op-{op}"><code>{op}</code></a>' for op in answering.get(kind, []))
        out.append(
            f'<tr id="problem-{html.escape(kind)}"><td><code>{html.escape(kind)}</code><br>'
            f"<span class='muted'>{html.escape(uri)}</span></td><td>{entry['status']}</td>"
            f"<td>{html.escape(entry['title'])}</td><td>{operations or '<span class=muted>none (never answered by a conformant server)</span>'}</td></tr>"
        )
    out.append("</table>")
    return out


def _resolve(document: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    ref = item.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return item
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def _schema_name(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return f"<code>{html.escape(ref)}</code>"
    return f"<code>{html.escape(json.dumps(schema, sort_keys=True))}</code>"


def _checks() -> list[str]:
    out = ["<table><tr><th>check</th><th>what it shows</th><th>requirements</th></tr>"]
    for item in all_checks():
        links = ", ".join(f'<a href="#{req}">{html.escape(req)}</a>' for req in item.requirements)
        out.append(
            f'<tr id="check-{html.escape(item.name)}"><td><code>{html.escape(item.name)}</code></td>'
            f"<td>{html.escape(item.title)}</td><td>{links}</td></tr>"
        )
    out.append("</table>")
    return out
