"""`check --embedded` runs the reference in a child process: it answers, ends with the run (or when
the run's process dies), ignores the run's environment, and a start failure is a set-up error."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conformance.config import ConfigError
from conformance.embedded import free_port, reference_process


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_reference_runs_in_a_child_that_ends_with_the_block(tmp_path: Path) -> None:
    with reference_process(log_file=tmp_path / "server.log") as server:
        assert server.pid is not None and server.pid != os.getpid() and not _gone(server.pid)
        answer = httpx.get(f"{server.url}/sessions", headers={"Authorization": f"Bearer {server.tokens[0]}"})
        assert answer.status_code == 200, answer.text
        assert httpx.get(f"{server.url}/sessions", headers={"Authorization": "Bearer nobody"}).status_code == 401
    assert _gone(server.pid)
    assert "Fatal Python error" not in (tmp_path / "server.log").read_text()


def test_the_child_reads_its_settings_from_its_arguments_not_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{free_port()}/v1/traces")
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/nothing")
    with reference_process() as server:
        advertised = httpx.get(f"{server.url}/capabilities").json()["capabilities"]
    assert "diagnostics.trace-context" not in advertised and "diagnostics.query-count" in advertised


def test_a_child_that_cannot_start_is_a_set_up_error_showing_its_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with pytest.raises(ConfigError, match="exited with status 2 before it answered") as raised:
        with reference_process("postgresql://nobody@127.0.0.1:1/nothing", log_file=log):
            pass
    assert "cannot start on --database-url" in str(raised.value) and str(log) in str(raised.value)


def test_the_server_stops_when_its_standard_input_closes(tmp_path: Path) -> None:
    """The parent's end of the pipe closes however the parent exits, killed included."""
    port = free_port()
    command = [sys.executable, "-m", "reference_impl", "--database-url", f"sqlite:///{tmp_path / 'x.db'}",
               "--port", str(port), "--log-level", "warning", "--exit-on-stdin-eof"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/capabilities").status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(timeout=20) == 0
        output = process.stdout.read().decode() if process.stdout else ""
        assert "Fatal Python error" not in output, output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
