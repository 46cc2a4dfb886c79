"""The Python package against the Rust path, on the fake Messages API (figures in
docs/python.md).

1. The contract page's example (tests/seed_example.py) as a process vs its Rust twin
   (examples/continuation.rs): wall time and peak memory (max RSS), first run and wake.
2. Per-turn cost: one step of 100 turns (99 Read calls, then the answer) in a new
   session, timed around the workflow run, in Python (`run_sync`, and `await run` with an
   `on_event` callback) vs examples/turns.rs.

Run from crates/flower-py after `maturin develop` (same profile as the cargo builds):
    python bench/bench.py [--release] [--trials N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from conftest import REPO, Fake  # noqa: E402

import flower  # noqa: E402

TURNS = 100


def run_measured(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int, str]:
    """Wall seconds, max RSS (KiB) and stdout of one process (its own rusage)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert os.waitstatus_to_exitcode(status) == 0, err
    return wall, usage.ru_maxrss, out


def seed(trials: int, profile: str) -> None:
    fake = Fake(REPO / "target" / profile / "examples" / "fake_api", {})
    env = fake.env()
    rust = [str(REPO / "target" / profile / "examples" / "continuation")]
    python = [sys.executable, str(HERE.parent / "tests" / "seed_example.py")]
    rows: dict[str, list[tuple[float, int]]] = {}
    for _ in range(trials):
        for name, cmd in (("rust", rust), ("python", python)):
            with tempfile.TemporaryDirectory() as d:
                Path(d, "seed.txt").write_text("向日葵\n", encoding="utf-8")
                for phase in ("first", "wake"):
                    wall, rss, _ = run_measured(cmd, Path(d), env)
                    rows.setdefault(f"{name} {phase}", []).append((wall, rss))
    fake.stop()
    print(f"seed example, {trials} trials each, wall min / median, max RSS median:")
    for key, values in rows.items():
        wall = min(v[0] for v in values)
        med = statistics.median(v[0] for v in values)
        rss = statistics.median(v[1] for v in values)
        print(f"  {key:13} {wall * 1000:7.1f} / {med * 1000:7.1f} ms  {rss / 1024:6.1f} MiB")


def turns(trials: int, profile: str) -> None:
    fake = Fake(REPO / "target" / profile / "examples" / "fake_api", {"tools": TURNS - 1, "answer": "done"})
    env = fake.env()
    rust_cmd = [str(REPO / "target" / profile / "examples" / "turns"), str(TURNS)]
    agent = flower.AgentSpec("reader", "读文件。", allowed_tools=["Read"], max_turns=TURNS)
    wf = flower.Workflow([flower.Step("读", agent, "读 seed.txt")], continuous=False)
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    figures: dict[str, list[float]] = {"rust": [], "python run_sync": [], "python await + on_event": []}
    try:
        for _ in range(trials):
            with tempfile.TemporaryDirectory() as d:
                Path(d, "seed.txt").write_text("向日葵\n", encoding="utf-8")
                _, _, out = run_measured(rust_cmd, Path(d), env)
                seconds, done = out.split()
                assert int(done) == TURNS, out
                figures["rust"].append(float(seconds))

                cwd = os.getcwd()
                os.chdir(d)
                try:
                    with flower.Runtime() as rt:
                        started = time.perf_counter()
                        ctx = wf.run_sync(rt)
                        figures["python run_sync"].append(time.perf_counter() - started)
                    assert ctx["_results"][0]["num_turns"] == TURNS
                    events = []
                    with flower.Runtime(on_event=events.append) as rt:
                        started = time.perf_counter()
                        ctx = asyncio.run(_await(wf, rt))
                        figures["python await + on_event"].append(time.perf_counter() - started)
                    assert ctx["_results"][0]["num_turns"] == TURNS
                finally:
                    os.chdir(cwd)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        fake.stop()
    # The minimum is the figure least disturbed by whatever else the machine runs.
    print(f"{TURNS}-turn step, {trials} trials each, min and median (per turn; min vs Rust's min):")
    rust = min(figures["rust"])
    for key, values in figures.items():
        t, med = min(values), statistics.median(values)
        print(
            f"  {key:25} min {t * 1000:7.1f} ms  median {med * 1000:7.1f} ms"
            f"  ({t / TURNS * 1000:5.2f} ms/turn; {100 * (t - rust) / rust:+5.1f} %)"
        )


async def _await(wf, rt):
    return await wf.run(rt)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", action="store_true")
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    profile = "release" if args.release else "debug"
    build = ["cargo", "build", "--quiet", "--example", "continuation", "--example", "turns", "--example", "fake_api"]
    subprocess.run(build + (["--release"] if args.release else []), cwd=REPO, check=True)
    seed(args.trials, profile)
    turns(args.trials, profile)


if __name__ == "__main__":
    main()
