"""Configuration: file, environment twins, precedence, fast and clear failures."""

from __future__ import annotations

import pytest

from conformance.cli import main
from conformance.config import KEYS, ConfigError, ExpectedFailure, load, load_expected_failures


def test_environment_twin_for_every_key() -> None:
    assert {key.env for key in KEYS} == {f"SESSION_LINEAGE_{key.name.upper()}" for key in KEYS}


def test_precedence_cli_over_environment_over_file(tmp_path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("target: http://file.example\ntokens: [a, b]\nseed: 1\nstrict: false\n")
    config = load(file, environ={"SESSION_LINEAGE_SEED": "2", "SESSION_LINEAGE_STRICT": "true"})
    assert (config.target, config.seed, config.strict, config.tokens) == ("http://file.example", 2, True, ("a", "b"))
    config = load(file, overrides={"seed": 3}, environ={"SESSION_LINEAGE_SEED": "2"})
    assert config.seed == 3


def test_missing_target_names_both_ways_to_set_it() -> None:
    with pytest.raises(ConfigError, match="SESSION_LINEAGE_TARGET"):
        load(environ={"SESSION_LINEAGE_TOKENS": "a,b"})


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"SESSION_LINEAGE_TARGET": "ftp://x", "SESSION_LINEAGE_TOKENS": "a,b"}, "http"),
        ({"SESSION_LINEAGE_TARGET": "http://x", "SESSION_LINEAGE_TOKENS": "a"}, "two principals"),
        ({"SESSION_LINEAGE_TARGET": "http://x", "SESSION_LINEAGE_TOKENS": "a,a"}, "own token"),
        ({"SESSION_LINEAGE_TARGET": "http://x", "SESSION_LINEAGE_TOKENS": "a,b", "SESSION_LINEAGE_STRICT": "maybe"}, "true or false"),
        ({"SESSION_LINEAGE_TARGET": "http://x", "SESSION_LINEAGE_TOKENS": "a,b", "SESSION_LINEAGE_SEED": "-1"}, "non-negative"),
    ],
)
def test_invalid_values_fail_fast(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(environ=environ)


def test_unknown_file_keys_are_rejected(tmp_path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("target: http://x\ntokens: [a, b]\ntagret: typo\n")
    with pytest.raises(ConfigError, match="tagret"):
        load(file, environ={})


def test_random_prefix_and_seed_per_run() -> None:
    environ = {"SESSION_LINEAGE_TARGET": "http://x", "SESSION_LINEAGE_TOKENS": "a,b"}
    first, second = load(environ=environ), load(environ=environ)
    assert first.id_prefix != second.id_prefix and first.id_prefix.startswith("slc-")


def test_redacted_config_hides_tokens() -> None:
    config = load(environ={"SESSION_LINEAGE_TARGET": "http://x", "SESSION_LINEAGE_TOKENS": "secret-one,secret-two"})
    assert "secret" not in repr(config.redacted())


def test_expected_failures_need_reasons(tmp_path) -> None:
    file = tmp_path / "xf.yaml"
    file.write_text(
        "- check: fork.idempotent_retry\n  reason: keys land in 2.3\n  link: https://tracker.example/7\n"
        "- requirement: ERR-MEDIA-001\n  reason: proxy\n"
    )
    assert load_expected_failures(str(file)) == {
        "fork.idempotent_retry": ExpectedFailure(
            "fork.idempotent_retry", "check", "keys land in 2.3", "https://tracker.example/7"
        ),
        "ERR-MEDIA-001": ExpectedFailure("ERR-MEDIA-001", "requirement", "proxy", None),
    }
    file.write_text("- check: fork.idempotent_retry\n")
    with pytest.raises(ConfigError, match="reason"):
        load_expected_failures(str(file))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- check: a.b\n  requirement: X-1\n  reason: both\n", "either"),
        ("- check: a.b\n  reason: r\n  linc: typo\n", "linc"),
        ("- check: a.b\n  reason: r\n- check: a.b\n  reason: again\n", "twice"),
        ("- check: [unclosed\n", "not valid YAML"),
    ],
    ids=["check-and-requirement", "unknown-key", "duplicate", "bad-yaml"],
)
def test_malformed_expected_failures_are_rejected(tmp_path, text: str, message: str) -> None:
    file = tmp_path / "xf.yaml"
    file.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_expected_failures(str(file))


BASE_ENV = {"SESSION_LINEAGE_TARGET": "http://x", "SESSION_LINEAGE_TOKENS": "a,b"}


def test_profile_claim_is_validated() -> None:
    assert load(environ={**BASE_ENV, "SESSION_LINEAGE_PROFILE": "core"}).profile == "core"
    assert load(environ={**BASE_ENV, "SESSION_LINEAGE_PROFILE": "full@1.0.0"}).profile == "full@1.0.0"
    assert load(environ=BASE_ENV).profile is None  # the target's claim, else full at the suite's version
    for claim, message in (("gold", "unknown profile"), ("full@2.0.0", "major"), ("full@1.99.0", "newer"), ("full@1", "NAME@X.Y.Z")):
        with pytest.raises(ConfigError, match=message):
            load(environ={**BASE_ENV, "SESSION_LINEAGE_PROFILE": claim})


def test_skip_preflight_rejects_unknown_items() -> None:
    config = load(environ={**BASE_ENV, "SESSION_LINEAGE_SKIP_PREFLIGHT": "replicas,reports"})
    assert config.skip_preflight == ("replicas", "reports")
    with pytest.raises(ConfigError, match="unknown preflight item.*tokenz"):
        load(environ={**BASE_ENV, "SESSION_LINEAGE_SKIP_PREFLIGHT": "tokens,tokenz"})


def test_cli_exits_2_on_configuration_errors(monkeypatch, capsys) -> None:
    for name in [key.env for key in KEYS] + ["SESSION_LINEAGE_CONFIG"]:
        monkeypatch.delenv(name, raising=False)
    assert main(["check", "--target", "http://127.0.0.1:9"]) == 2
    assert "tokens" in capsys.readouterr().err
    assert main([]) == 2


def test_example_configuration_file_loads() -> None:
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "conformance.example.yaml"
    config = load(example, environ={})
    assert config.target == "https://lineage.example.internal" and len(config.tokens) == 5
    assert config.role_index() == {"owner": 0, "stranger": 1, "reader": 2, "writer": 3, "outsider": 4}


def test_tokens_by_role() -> None:
    """A mapping or `role=TOKEN` items name each token's role; a plain list fills them in order."""
    base = {"SESSION_LINEAGE_TARGET": "http://x"}
    plain = load(environ={**base, "SESSION_LINEAGE_TOKENS": "a,b,c"})
    assert plain.role_index() == {"owner": 0, "stranger": 1, "reader": 2}
    named = load(environ={**base, "SESSION_LINEAGE_TOKENS": "owner=a==,writer=b"})
    assert named.tokens == ("a==", "b") and named.role_index() == {"owner": 0, "writer": 1}
    mapped = load(overrides={"target": "http://x", "tokens": {"outsider": "o", "owner": "a"}}, environ={})
    assert mapped.tokens == ("o", "a") and mapped.role_index() == {"outsider": 0, "owner": 1}
    for bad in ("owner=a,b", "boss=a,owner=b"):
        with pytest.raises(ConfigError):
            load(environ={**base, "SESSION_LINEAGE_TOKENS": bad})


def test_a_misspelled_key_names_the_key_the_file_and_a_1_based_index(tmp_path) -> None:
    file = tmp_path / "xf.yaml"
    file.write_text("- check: a.b\n  reason: r\n- chek: a.c\n  reason: typo\n")
    with pytest.raises(ConfigError) as raised:
        load_expected_failures(str(file))
    assert str(raised.value) == (
        f"expected-failures file {str(file)!r}, entry 2 has unknown key 'chek' (known: check, requirement, reason, link)"
    )
