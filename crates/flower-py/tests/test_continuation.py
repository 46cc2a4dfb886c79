"""The contract page's example, verbatim, continuing across processes; `continuous=False`;
`wake_state` reading without writing; a SIGKILLed run resumed by another process."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TIMEOUT, WORD, run_python, wait_for

import flower
from flower import AgentSpec, Runtime, Step, Workflow

SEED = (Path(__file__).parent / "seed_example.py").read_text(encoding="utf-8")
PROMPT = "读 seed.txt,只回文件里那个词。"


def seed(project: Path, env: dict[str, str]) -> tuple[int, dict[str, str]]:
    """Runs the page's example in its own process; what it printed."""
    out = subprocess.run(
        [sys.executable, "-c", SEED], cwd=project, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout
    return int(lines[0]), ast.literal_eval(lines[1])


def terse() -> AgentSpec:
    return AgentSpec(
        name="terse",
        instructions="回答极简,一行以内,不解释不寒暄。",
        allowed_tools=["Read", "Glob"],
        max_turns=4,
    )


def test_the_seed_example_run_twice_continues_the_same_session(project, fake):
    woke, sessions = seed(project, fake.env())
    assert woke == 1
    assert list(sessions) == ["取词"]
    assert fake.count == 2, "Read, then the word"

    woke2, sessions2 = seed(project, fake.env())
    assert woke2 == 2
    assert sessions2["取词"] == sessions["取词"], "取词 continued the last run's session"

    lineage = json.loads((project / "runs/lineage.json").read_text(encoding="utf-8"))
    assert lineage == {"workspace": str(project.resolve()), "woke": 2, "steps": sessions2}
    rows = json.loads((project / "runs/manifest.json").read_text(encoding="utf-8"))
    assert [r["step"] for r in rows] == ["取词", "取词"]
    assert all(r["ok"] for r in rows)
    assert rows[1]["resumed"] is True


async def test_ctx_has_woke_sessions_and_each_steps_result(project, fake):
    rt = Runtime(workspace=".", run_dir="runs")
    try:
        ctx = await Workflow([Step("取词", terse(), PROMPT)]).run(rt)
        assert rt.has_session(ctx["_sessions"]["取词"])
        assert not rt.has_session("00000000-0000-4000-8000-000000000000")
    finally:
        rt.close()
    assert ctx["_woke"] == 1
    assert ctx["取词"] == WORD
    assert [r["step"] for r in ctx["_results"]] == ["取词"]
    assert ctx["_results"][0]["ok"] is True


def test_continuous_false_starts_a_new_session_each_process(project, fake):
    def once() -> dict:
        with Runtime(workspace=".", run_dir="runs") as rt:
            return Workflow([Step("取词", terse(), PROMPT)], continuous=False).run_sync(rt)

    first = once()
    second = once()
    assert first["_woke"] == 1 and second["_woke"] == 1
    assert first["_sessions"]["取词"] != second["_sessions"]["取词"]


def test_a_prompt_can_be_a_function_of_the_context(project, fake):
    seen = []

    def second_prompt(ctx: dict) -> str:
        seen.append(dict(ctx))
        return f"上一步说的是 {ctx['取词']}"

    with Runtime() as rt:
        ctx = Workflow(
            [Step("取词", terse(), PROMPT), Step("复述", terse(), second_prompt)]
        ).run_sync(rt)
    assert seen[0]["取词"] == WORD
    assert "取词" in seen[0]["_sessions"]
    assert ctx["复述"] == WORD
    assert set(ctx["_sessions"]) == {"取词", "复述"}


def snapshot(root: Path) -> dict[str, str]:
    """Every file under `root` with its bytes' hash, and every directory."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.join(dirpath, d)] = "dir"
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[p] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out


def test_wake_state_writes_nothing(project, fake):
    assert flower.wake_state(".", run_dir="runs")["woke"] == 0
    assert not (project / "runs").exists(), "a fresh directory stays untouched"
    woke, sessions = seed(project, fake.env())
    before = snapshot(project)
    st = flower.wake_state(".", run_dir="runs")
    assert snapshot(project) == before
    assert set(st) == {"waking", "brief", "goal", "checks", "woke", "steps"}
    assert st["woke"] == 1
    assert st["steps"] == sessions
    assert st["waking"] is False and st["checks"] == 0


KILLED = """
import asyncio
from flower import AgentSpec, Runtime, Step, Workflow
terse = AgentSpec(name="terse", instructions="回答极简,一行以内,不解释不寒暄。", allowed_tools=["Read", "Glob"], max_turns=4)
async def main():
    rt = Runtime(workspace=".", run_dir="runs")
    ctx = await Workflow([Step("取词", terse, "读 seed.txt,只回文件里那个词。")]).run(rt)
    print(ctx["_woke"], ctx["_sessions"]["取词"])
asyncio.run(main())
"""


def test_a_run_killed_mid_step_resumes_from_another_python_process(project, start_fake):
    held = start_fake(hold=[2])
    child = run_python(KILLED, project, held.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert held.wait_requests(2), "the second request (after the Read) arrives"
        lineage = project / "runs/lineage.json"
        assert wait_for(lineage.exists)
        remembered = json.loads(lineage.read_text(encoding="utf-8"))["steps"]["取词"]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL

    model = start_fake()
    out = subprocess.run(
        [sys.executable, "-c", KILLED], cwd=project, env=model.env(), capture_output=True, text=True, timeout=TIMEOUT
    )
    assert out.returncode == 0, out.stderr
    woke, session = out.stdout.split()
    assert woke == "2"
    assert session == remembered, "the killed run's session continued"
