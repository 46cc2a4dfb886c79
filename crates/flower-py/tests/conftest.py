"""Fixtures: the project's fake Messages API (tests/it/support/fake.rs, run as the
`fake_api` example) and the `flower` binary, both built by cargo from this repository."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
WORD = "向日葵"
# Only reached when something is broken.
TIMEOUT = 60.0


def _target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))


@pytest.fixture(scope="session")
def binaries() -> dict[str, Path]:
    """`cargo build` of the fake server example and the flower binary (at once when
    they are up to date)."""
    subprocess.run(
        ["cargo", "build", "--quiet", "--example", "fake_api", "--bin", "flower"],
        cwd=REPO,
        check=True,
    )
    debug = _target_dir() / "debug"
    return {"fake_api": debug / "examples" / "fake_api", "flower": debug / "flower"}


class Fake:
    """A running fake Messages API: its URL and the requests it has seen."""

    def __init__(self, exe: Path, config: dict):
        self.proc = subprocess.Popen(
            [str(exe), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        assert self.url.startswith("http://"), self.url
        self.count = 0
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("request "):
                with self._cond:
                    self.count = int(line.split()[1])
                    self._cond.notify_all()

    def wait_requests(self, n: int, timeout: float = TIMEOUT) -> bool:
        """Whether request `n` has arrived (it is recorded before it is answered)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.count >= n, timeout)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "FLOWER_"))}
        for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            env.pop(proxy, None)
        env.update(
            ANTHROPIC_BASE_URL=self.url,
            ANTHROPIC_API_KEY="sk-ant-fake-test-key",
            FLOWER_MAX_ATTEMPTS="1",
        )
        return env

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def start_fake(binaries):
    """Starts fakes with a config (`answer`, `tools`, `hold`); stops them after the test."""
    started: list[Fake] = []

    def start(**config) -> Fake:
        fake = Fake(binaries["fake_api"], config)
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.stop()


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """A temp directory with seed.txt, made the current directory (run_dir is relative
    to it)."""
    (tmp_path / "seed.txt").write_text(WORD + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def fake(start_fake, monkeypatch) -> Fake:
    """The seed example's model, this process pointed at it."""
    server = start_fake()
    for key in list(os.environ):
        if key.startswith(("ANTHROPIC_", "FLOWER_")):
            monkeypatch.delenv(key)
    for key, value in server.env().items():
        if key.startswith(("ANTHROPIC_", "FLOWER_")):
            monkeypatch.setenv(key, value)
    return server


def run_python(script: str, cwd: Path, env: dict[str, str], **kwargs) -> subprocess.Popen:
    """Another Python process running `script` (this interpreter, this venv), with
    SIGINT at its default as in a user's terminal: a CI job started in the background of a
    non-interactive shell ignores SIGINT, and Python then installs no KeyboardInterrupt
    handler at all (the Ctrl-C tests hung on it)."""
    return subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        **kwargs,
    )


def wait_for(check, timeout: float = TIMEOUT) -> bool:
    """Polls `check` until it holds (for files another process writes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return False
