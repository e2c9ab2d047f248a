"""Shared fixtures: a real PostgreSQL database per test; and the quick/deep split.

The default run is the quick set (every mutant caught once, the PostgreSQL tests). Tests marked
`deep` (race mutants 10 rounds each, seeded runs, deep fuzz, long proofs) are deselected from it,
never skipped; `pytest --deep` runs only them. Both sets run on pytest-xdist workers. No test may
rely on `xdist_group` to run alone or beside another: with pytest 9.2, pytest-xdist 3.8 no longer
honours it (pytest-xdist issue 1386), and tests that share a resource lock it themselves.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


def _reachable(url: str) -> bool:
    try:
        engine = create_engine(_psycopg(url), connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
        return True
    except Exception:
        return False


def _psycopg(url: str) -> str:
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server URL: DATABASE_URL, the local server, or a testcontainers one.

    In CI (CI=true) a missing server fails the tests instead of skipping them.
    """
    candidates = [os.environ["DATABASE_URL"]] if os.environ.get("DATABASE_URL") else [LOCAL_POSTGRES]
    for url in candidates:
        if _reachable(url):
            yield url
            return
    try:
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver="psycopg") as container:
            yield container.get_connection_url()
            return
    except Exception as exc:
        reason = f"no PostgreSQL reachable at {candidates[0]} and no Docker for testcontainers: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh database on the server, dropped after the test."""
    name = f"sl_test_{secrets.token_hex(6)}"
    admin = create_engine(_psycopg(postgres_server), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(postgres_server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--deep", action="store_true", default=False,
                     help="run the deep set (tests marked `deep`: before a release and nightly) instead of the quick set")


# Modules whose tests run the whole suite against a server (half a minute each): handed to the
# workers first, so that no worker starts one while the other has nothing left to do.
SCHEDULE_FIRST = ("tests/test_variants.py", "tests/test_postgres.py", "tests/test_reference_conformance.py",
                  "tests/test_concurrency_mutants.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the set asked for; the other set is deselected (so it reads as not run, not as skipped)."""
    deep = config.getoption("--deep")
    keep = [item for item in items if (item.get_closest_marker("deep") is not None) == deep]
    dropped = [item for item in items if (item.get_closest_marker("deep") is not None) != deep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    keep.sort(key=lambda item: not item.nodeid.startswith(SCHEDULE_FIRST))  # stable: otherwise collection order
    items[:] = keep


_postgres_outcomes: dict[str, int] = {"passed": 0, "other": 0}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "postgres" in report.keywords and report.when == "call":
        _postgres_outcomes["passed" if report.passed else "other"] += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI the PostgreSQL tests must have run: none passing fails the run, even if all else passed."""
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker sees only its share; the controller judges the whole run
    selected = not session.config.getoption("markexpr") and not session.config.getoption("keyword")
    if os.environ.get("CI", "").lower() == "true" and selected and session.testscollected:
        if _postgres_outcomes["passed"] == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _postgres_outcomes["passed"] or _postgres_outcomes["other"]:
        terminalreporter.write_line(
            f"postgresql tests: {_postgres_outcomes['passed']} passed, {_postgres_outcomes['other']} not passed"
        )
