"""Configuration: file, environment twins, precedence, fast and clear failures."""

from __future__ import annotations

import pytest

from conformance.cli import main
from conformance.config import KEYS, ConfigError, load, load_expected_failures


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
        "fork.idempotent_retry": "keys land in 2.3 (https://tracker.example/7)",
        "ERR-MEDIA-001": "proxy",
    }
    file.write_text("- check: fork.idempotent_retry\n")
    with pytest.raises(ConfigError, match="reason"):
        load_expected_failures(str(file))


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
    assert config.target == "https://lineage.example.internal" and len(config.tokens) == 2
