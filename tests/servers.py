"""Reference server processes for multi-process tests: `session-lineage serve` in subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from conformance.embedded import bound_socket

ROOT = Path(__file__).resolve().parents[1]
# One token per suite role, in order (owner, stranger, reader, writer, outsider); the outsider is
# in another project, so the tokens file uses both of its forms.
TOKENS = {
    "proc-alice-token": "alice",
    "proc-bob-token": "bob",
    "proc-carol-token": "carol",
    "proc-dave-token": "dave",
    "proc-erin-token": "erin",
}
PROJECTS = {"erin": "elsewhere"}


@dataclass
class ServerProcess:
    url: str
    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)


def start_server(database_url: str, tokens_file: Path, extra_env: dict[str, str] | None = None,
                 module: str = "conformance.cli", args: Sequence[str] = ()) -> ServerProcess:
    sock = bound_socket()  # held until the child has its copy: no other process can take the port
    port = int(sock.getsockname()[1])
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(extra_env or {})}
    command = [sys.executable, "-m", module, "serve", "--database-url", database_url, "--fd", str(sock.fileno()),
               "--tokens-file", str(tokens_file), *args]
    with sock:
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   pass_fds=(sock.fileno(),))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}: {process.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{url}/capabilities", timeout=1).status_code == 200:
                return ServerProcess(url, process)
        except httpx.TransportError:
            pass
        time.sleep(0.05)  # waiting for a child process to bind its port
    process.kill()
    raise RuntimeError("server did not become ready within 60 s")


def write_tokens(directory: Path) -> Path:
    """`token: principal` for the default project, `token: {principal: p, project: q}` otherwise."""
    path = directory / "tokens.yaml"
    lines = []
    for token, principal in TOKENS.items():
        if principal in PROJECTS:
            lines.append(f"{token}: {{principal: {principal}, project: {PROJECTS[principal]}}}\n")
        else:
            lines.append(f"{token}: {principal}\n")
    path.write_text("".join(lines))
    return path


@contextmanager
def server_processes(database_url: str, directory: Path, count: int = 2,
                     extra_env: dict[str, str] | None = None, module: str = "conformance.cli",
                     args: Sequence[str] = ()) -> Iterator[list[ServerProcess]]:
    tokens_file = write_tokens(directory)
    started: list[ServerProcess] = []
    try:
        for _ in range(count):
            started.append(start_server(database_url, tokens_file, extra_env, module, args))
        yield started
    finally:
        for server in started:
            if server.process.poll() is None:
                server.process.terminate()
                try:
                    server.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    server.kill()
