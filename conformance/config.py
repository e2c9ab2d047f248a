"""Suite configuration: a YAML file, an environment-variable twin for every key, CLI overrides.

Precedence: command line > environment > file > defaults. Missing or invalid values fail fast
with a `ConfigError` naming the key and both ways to set it.
"""

from __future__ import annotations

import os
import random
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

ENV_PREFIX = "SESSION_LINEAGE_"
# The roles of the suite's principals. A plain list of tokens fills them in this order; a mapping
# (`owner: TOKEN`) or `role=TOKEN` items name them. The outsider belongs to another project.
ROLES = ("owner", "stranger", "reader", "writer", "outsider")


class ConfigError(Exception):
    """The configuration is missing or invalid; the CLI exits with status 2."""


@dataclass(frozen=True)
class Config:
    target: str
    tokens: tuple[str, ...]  # one bearer token per principal; at least two principals
    strict: bool = False
    seed: int = 0
    expect_capabilities: tuple[str, ...] = ()
    expected_failures: str | None = None
    select: tuple[str, ...] = ()
    timeout: float = 30.0
    id_prefix: str = ""
    replicas: tuple[str, ...] = ()  # more base URLs of the same deployment
    concurrency: int = 32
    depth: str = "quick"  # run depth: how much generated input (see DEPTHS); not a profile
    fuzz_examples: int = 5
    stateful_examples: int = 5
    profile: str | None = None  # the claim, NAME or NAME@VERSION; None: the target's or the default
    keep: bool = False  # keep what the suite created (today nothing can be removed anyway)
    skip_preflight: tuple[str, ...] = ()  # preflight items not to run
    roles: tuple[str, ...] = ()  # the role of each token, in order; empty: ROLES in order
    otlp_receiver: str | None = None  # [HOST:]PORT of the run's OTLP/HTTP trace receiver (otlp.py)
    otlp_wait: float = 10.0  # the most a count waits for a request's spans, in seconds (otlp.WAIT_S)
    parallel: bool = True  # two more processes run the checks that generate input, then share the queue (lanes.py)

    def role_index(self) -> dict[str, int]:
        """Which token plays each role."""
        names = self.roles or ROLES[: len(self.tokens)]
        return {role: index for index, role in enumerate(names)}

    def redacted(self) -> dict[str, Any]:
        """The configuration as reports publish it: tokens are never written out."""
        data = asdict(self)
        data["tokens"] = [f"<redacted:{len(token)} chars>" for token in self.tokens]
        return data


@dataclass(frozen=True)
class Key:
    name: str
    parse: Callable[[Any], Any]
    required: bool = False
    help: str = ""

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


def _string(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    return value.strip()


def _url(value: Any) -> str:
    text = _string(value).rstrip("/")
    if not text.startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL")
    return text


def _list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = [str(item).strip() for item in value]
    else:
        raise ValueError("expected a list or a comma-separated string")
    return tuple(item for item in items if item)


def _urls(value: Any) -> tuple[str, ...]:
    return tuple(_url(item) for item in _list(value))


def split_roles(value: Any) -> tuple[Any, tuple[str, ...]]:
    """Tokens given by role (a mapping, or `role=TOKEN` items) as (tokens, roles); others unchanged."""
    if isinstance(value, dict):
        pairs = [(str(role), token) for role, token in value.items()]
    else:
        items = list(_list(value))
        named = [item.partition("=")[0] in ROLES and "=" in item for item in items]
        if not any(named):
            return value, ()
        if not all(named):
            raise ValueError("name every token's role (role=TOKEN) or none")
        pairs = [(item.partition("=")[0], item.partition("=")[2]) for item in items]
    unknown = [role for role, _ in pairs if role not in ROLES]
    if unknown:
        raise ValueError(f"unknown role(s) {', '.join(unknown)} (known: {', '.join(ROLES)})")
    return [token for _, token in pairs], tuple(role for role, _ in pairs)


def _tokens(value: Any) -> tuple[str, ...]:
    tokens = _list(value)
    if isinstance(value, str) and len(tokens) == 1 and len(tokens[0].split()) > 1:
        raise ValueError("separate the tokens with commas (a,b or owner=a,stranger=b), not spaces")
    if len(tokens) < 2:
        raise ValueError("expected bearer tokens of at least two principals")
    if len(set(tokens)) != len(tokens):
        raise ValueError("each principal needs its own token")
    return tokens


def _claim(value: Any) -> str:
    from conformance.profiles import parse_claim

    text = _string(value)
    parse_claim(text, "configuration")  # raises ValueError naming what is wrong
    return text


def _preflight_names(value: Any) -> tuple[str, ...]:
    from conformance.preflight import ITEM_NAMES

    names = _list(value)
    unknown = [name for name in names if name not in ITEM_NAMES]
    if unknown:
        raise ValueError(f"unknown preflight item(s) {', '.join(unknown)} (known: {', '.join(ITEM_NAMES)})")
    return names


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError("expected true or false")


def _positive_int(value: Any) -> int:
    number = int(value)
    if number < 1:
        raise ValueError("expected a positive integer")
    return number


def _seed(value: Any) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("expected a non-negative integer")
    return number


def _positive_float(value: Any) -> float:
    number = float(value)
    if number <= 0:
        raise ValueError("expected a positive number")
    return number


# Run depths: how many generated cases the random layers (Schemathesis, the state machines) try.
# Every deterministic check runs in full at any depth; `deep` is for nightly runs. An explicit
# `fuzz_examples` or `stateful_examples` wins over the depth's number.
DEPTHS: dict[str, dict[str, int]] = {
    "quick": {"fuzz_examples": 5, "stateful_examples": 5},
    "deep": {"fuzz_examples": 100, "stateful_examples": 100},
}


def _otlp_address(value: Any) -> str:
    from conformance.otlp import address

    text = str(value).strip()
    address(text)  # raises ValueError saying the form expected
    return text


def _depth(value: Any) -> str:
    text = str(value).strip().lower()
    if text not in DEPTHS:
        raise ValueError(f"expected one of {', '.join(DEPTHS)}")
    return text


KEYS = (
    Key("target", _url, required=True, help="base URL of the server under test"),
    Key("tokens", _tokens, required=True, help="bearer tokens of two or more principals: a list (roles owner, stranger, reader, writer, outsider, in that order) or a mapping role: token"),
    Key("strict", _bool, help="SHOULD failures gate too"),
    Key("seed", _seed, help="seed for every random choice; printed so a run can be replayed"),
    Key("expect_capabilities", _list, help="capabilities the target must advertise"),
    Key("expected_failures", _string, help="the target's expected-failures YAML file"),
    Key("select", _list, help="run only checks whose name or requirement ID starts with one of these"),
    Key("timeout", _positive_float, help="seconds to wait for one response"),
    Key("id_prefix", _string, help="prefix of every id the suite creates (default: random per run)"),
    Key("replicas", _urls, help="more base URLs of the same deployment; concurrency checks spread requests across all"),
    Key("concurrency", _positive_int, help="parallel requests in concurrency checks"),
    Key("depth", _depth, help="run depth: quick (default, a CI gate) or deep (nightly: 20 times the generated cases)"),
    Key("fuzz_examples", _positive_int, help="Schemathesis examples per operation (default from the depth)"),
    Key("stateful_examples", _positive_int, help="Hypothesis state-machine runs (default from the depth)"),
    Key("profile", _claim, help="the profile the target claims, NAME or NAME@VERSION (default: full at the suite's spec version)"),
    Key("keep", _bool, help="keep every session the suite creates (otherwise purged at the end where the target offers purge)"),
    Key("skip_preflight", _preflight_names, help="preflight items not to run, comma-separated"),
    Key("otlp_receiver", _otlp_address, help="[HOST:]PORT: receive the target's OTLP/HTTP traces there and count round trips from its database spans"),
    Key("parallel", _bool, help="run the checks that generate input (Schemathesis) in two more processes beside the others, which then share the rest of the queue (default true; false: one check at a time, in one process)"),
    Key("otlp_wait", _positive_float, help="seconds to wait, at most, for the spans of one request (default 10: more than the 5 s an OpenTelemetry SDK batches spans by default)"),
)
KEY_NAMES = {key.name for key in KEYS}


def load(
    file: str | os.PathLike[str] | None = None,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Config:
    """Merge defaults, the YAML file, the environment and overrides into a validated Config."""
    environ = dict(os.environ if environ is None else environ)
    raw: dict[str, Any] = {}
    if file is None and environ.get(ENV_PREFIX + "CONFIG"):
        file = environ[ENV_PREFIX + "CONFIG"]
    if file is not None:
        raw.update(_read_file(Path(file)))
    for key in KEYS:
        if key.env in environ:
            raw[key.name] = environ[key.env]
    for name, value in (overrides or {}).items():
        if value is not None:
            raw[name] = value

    values: dict[str, Any] = {}
    if "tokens" in raw:
        try:
            raw["tokens"], roles = split_roles(raw["tokens"])
        except ValueError as exc:
            raise ConfigError(f"invalid 'tokens' ({ENV_PREFIX}TOKENS): {exc}") from None
        if roles:
            values["roles"] = roles
    for key in KEYS:
        if key.name not in raw:
            if key.required:
                raise ConfigError(
                    f"missing configuration '{key.name}' ({key.help}): set it in the YAML file "
                    f"or in the environment variable {key.env}"
                )
            continue
        try:
            values[key.name] = key.parse(raw[key.name])
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"invalid '{key.name}' ({key.env}): {exc}") from None
    for name, number in DEPTHS[values.get("depth", "quick")].items():
        values.setdefault(name, number)
    values.setdefault("seed", random.SystemRandom().randrange(2**32))
    values.setdefault("id_prefix", f"slc-{secrets.token_hex(4)}-")
    return Config(**values)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong and where."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else str(problem)


def _read_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"configuration file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"configuration file {str(path)!r} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"configuration file {str(path)!r} is not valid YAML: {yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"configuration file {str(path)!r} must hold a mapping")
    unknown = sorted(set(data) - KEY_NAMES)
    if unknown:
        raise ConfigError(
            f"unknown configuration keys in {str(path)!r}: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(KEY_NAMES))})"
        )
    return data


@dataclass(frozen=True)
class ExpectedFailure:
    """One entry of a target's expected-failures file: a check name or a requirement ID."""

    name: str
    kind: str  # "check" or "requirement"
    reason: str
    link: str | None = None


def load_expected_failures(path: str | None) -> dict[str, ExpectedFailure]:
    """Check names or requirement IDs the target expects to fail, each with its reason and link.

    Only the file's shape is checked here; preflight checks that every name exists.
    """
    if path is None:
        return {}
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"expected-failures file {path!r} does not exist")
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8")) or []
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"expected-failures file {path!r} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"expected-failures file {path!r} is not valid YAML: {yaml_problem(exc)}") from None
    if not isinstance(data, list):
        raise ConfigError(f"expected-failures file {path!r} must hold a list")
    entries: dict[str, ExpectedFailure] = {}
    for position, item in enumerate(data, start=1):
        where = f"expected-failures file {path!r}, entry {position}"
        if not isinstance(item, dict):
            raise ConfigError(f"{where} is not a mapping: each entry needs either 'check' or 'requirement', and a 'reason'")
        unknown_keys = sorted(str(key) for key in set(item) - {"check", "requirement", "reason", "link"})
        if unknown_keys:
            raise ConfigError(
                f"{where} has unknown key{'s' if len(unknown_keys) > 1 else ''} {', '.join(map(repr, unknown_keys))} "
                "(known: check, requirement, reason, link)"
            )
        if not item.get("reason") or bool(item.get("check")) == bool(item.get("requirement")):
            raise ConfigError(f"{where} needs either 'check' or 'requirement', and a 'reason'")
        kind = "check" if item.get("check") else "requirement"
        name = str(item[kind])
        if name in entries:
            raise ConfigError(f"{where} lists {name!r} twice (an earlier entry names it too)")
        link = str(item["link"]) if item.get("link") else None
        entries[name] = ExpectedFailure(name, kind, str(item["reason"]), link)
    return entries


def example_config() -> str:
    """A commented YAML file listing every key and its environment twin."""
    lines = ["# session-lineage conformance configuration"]
    for key in KEYS:
        lines.append(f"# {key.help}{' (required)' if key.required else ''}; env: {key.env}")
        lines.append(f"# {key.name}:")
    return "\n".join(lines) + "\n"


__all__ = ["Config", "ConfigError", "ExpectedFailure", "KEYS", "load", "load_expected_failures", "example_config"]
