"""resume_from / fork within a run, resume_prompt across processes, Lineage, Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from conftest import TIMEOUT, run_python

from flower import AgentSpec, Lineage, Resilience, Runtime, Step, Workflow

PROMPT = "读 seed.txt,只回文件里那个词。"


def terse() -> AgentSpec:
    return AgentSpec(name="terse", instructions="回答极简。", allowed_tools=["Read", "Glob"], max_turns=4)


def test_resume_from_continues_a_session_and_fork_branches_it(project, fake):
    with Runtime() as rt:
        ctx = Workflow(
            [
                Step("取词", terse(), PROMPT),
                Step("再说", terse(), "再说一遍", resume_from="取词"),
                Step("分叉", terse(), "换个说法", resume_from="取词", fork=True),
            ]
        ).run_sync(rt)
    s = ctx["_sessions"]
    assert s["再说"] == s["取词"], "resume_from continues the same session"
    assert s["分叉"] != s["取词"], "a fork is a session of its own"


def test_resume_prompt_is_what_a_later_process_says(project, fake):
    prompts = []

    def resume(ctx: dict) -> str:
        prompts.append(ctx["_woke"])
        return "接着上次"

    for _ in range(2):
        with Runtime() as rt:
            ctx = Workflow([Step("取词", terse(), PROMPT, resume_prompt=resume)]).run_sync(rt)
    assert ctx["_woke"] == 2
    # Computed for each wake (the first run did not use it: nothing to continue).
    assert prompts == [1, 2]
    rows = json.loads((project / "runs/manifest.json").read_text(encoding="utf-8"))
    assert rows[1]["resumed"] is True


def test_lineage_remembers_and_archives(project):
    lineage = Lineage("runs", ".")
    assert lineage.woke == 0 and lineage.steps == {}
    assert lineage.remember("干活", "47395075-bec7-466e-80cd-f4d60b360235")
    assert not lineage.remember("干活#retry1", "x"), "suffixed names never enter"
    on_disk = json.loads((project / "runs/lineage.json").read_text(encoding="utf-8"))
    assert on_disk["steps"] == {"干活": "47395075-bec7-466e-80cd-f4d60b360235"}
    assert on_disk["workspace"] == str(project.resolve())
    (project / "需求.md").write_text("x", encoding="utf-8")
    lineage.archive(project / "notes/archive/1", extra=[project / "需求.md"])
    assert (project / "notes/archive/1/lineage.json").exists()
    assert (project / "notes/archive/1/需求.md").exists()
    assert lineage.steps == {} and lineage.woke == 0
    assert Resilience().max_attempts == 6
    assert Resilience.resume_prompt.startswith("上一轮在中途被打断")


SYNC = """
from flower import AgentSpec, Runtime, Step, Workflow
terse = AgentSpec(name="terse", instructions="回答极简。", allowed_tools=["Read"], max_turns=4)
with Runtime() as rt:
    Workflow([Step("取词", terse, "读 seed.txt")]).run_sync(rt)
"""

ASYNC = """
import asyncio
from flower import AgentSpec, Runtime, Step, Workflow
terse = AgentSpec(name="terse", instructions="回答极简。", allowed_tools=["Read"], max_turns=4)
async def main():
    rt = Runtime()
    try:
        await Workflow([Step("取词", terse, "读 seed.txt")]).run(rt)
    finally:
        rt.close()
asyncio.run(main())
"""


def ctrl_c(project: Path, start_fake, script: str) -> None:
    held = start_fake(hold=[2])
    child = run_python(script, project, held.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert held.wait_requests(2)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=TIMEOUT)
    assert child.returncode != 0
    assert "KeyboardInterrupt" in err, err
    assert "panicked" not in err, err
    rows = json.loads((project / "runs/manifest.json").read_text(encoding="utf-8"))
    lineage = json.loads((project / "runs/lineage.json").read_text(encoding="utf-8"))
    assert [(r["step"], r["error"]) for r in rows] == [("取词", "cancelled")]
    assert rows[0]["session_id"] == lineage["steps"]["取词"]


def test_ctrl_c_stops_run_sync_with_lineage_and_manifest_written(project, start_fake):
    ctrl_c(project, start_fake, SYNC)


def test_ctrl_c_under_asyncio_run_stops_the_run_with_lineage_and_manifest_written(project, start_fake):
    ctrl_c(project, start_fake, ASYNC)


TERM = """
import asyncio, os, signal
from flower import AgentSpec, Runtime, Step, Workflow
terse = AgentSpec(name="terse", instructions="回答极简。", allowed_tools=["Read"], max_turns=4)
rt = Runtime()
def on_term(signum, frame):
    rt.rescue()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
signal.signal(signal.SIGTERM, on_term)
async def main():
    await Workflow([Step("取词", terse, "读 seed.txt")]).run(rt)
asyncio.run(main())
"""


def test_a_sigterm_handler_calling_rescue_writes_the_in_flight_row(project, start_fake):
    held = start_fake(hold=[2])
    child = run_python(TERM, project, held.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert held.wait_requests(2)
    child.send_signal(signal.SIGTERM)
    child.communicate(timeout=TIMEOUT)
    assert child.returncode == -signal.SIGTERM
    rows = json.loads((project / "runs/manifest.json").read_text(encoding="utf-8"))
    assert [(r["step"], r["error"]) for r in rows] == [("取词", "killed-by-signal")]
