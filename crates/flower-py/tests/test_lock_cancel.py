"""One lock for the CLI and Python; asyncio cancellation; exceptions from callables."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess

import pytest
from conftest import TIMEOUT, WORD

from flower import AgentSpec, FlowerError, LockedError, Runtime, Step, Workflow

PROMPT = "读 seed.txt,只回文件里那个词。"


def terse() -> AgentSpec:
    return AgentSpec(name="terse", instructions="回答极简。", allowed_tools=["Read", "Glob"], max_turns=4)


def test_a_run_held_by_the_cli_is_refused_in_python(project, start_fake, binaries, monkeypatch):
    held = start_fake(hold=[1])
    for key, value in held.env().items():
        monkeypatch.setenv(key, value)
    cli = subprocess.Popen(
        [str(binaries["flower"]), "写个 hello 脚本"],
        cwd=project,
        env=held.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert held.wait_requests(1), "the CLI's first request arrives: it holds the run"
        with pytest.raises(LockedError) as refused:
            Runtime(workspace=".", run_dir="runs")
        assert f"另一个 flower 正在这里运行(pid {cli.pid}," in str(refused.value)
        assert "等它跑完再接着做:flower --wait" in str(refused.value)
        assert isinstance(refused.value, FlowerError)
    finally:
        cli.send_signal(signal.SIGTERM)
        cli.wait(timeout=TIMEOUT)


def test_a_run_held_by_python_is_refused_by_the_cli(project, fake, binaries):
    with Runtime(workspace=".", run_dir="runs"):
        out = subprocess.run(
            [str(binaries["flower"]), "写个 hello 脚本"],
            cwd=project,
            env=fake.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    assert out.returncode == 3, out.stderr
    assert f"另一个 flower 正在这里运行(pid {os.getpid()}," in out.stderr
    assert fake.count == 0, "nothing was sent"
    # Closed: the CLI may have the run now (and Python again after it).
    Runtime(workspace=".", run_dir="runs").close()


async def test_cancelling_the_task_stops_the_run_with_lineage_and_manifest_written(project, start_fake, monkeypatch):
    held = start_fake(hold=[2])
    for key, value in held.env().items():
        monkeypatch.setenv(key, value)
    rt = Runtime(workspace=".", run_dir="runs")
    async def main():
        return await Workflow([Step("取词", terse(), PROMPT)]).run(rt)

    task = asyncio.create_task(main())
    assert await asyncio.to_thread(held.wait_requests, 2), "the step's second request arrives"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    rt.close()

    lineage = json.loads((project / "runs/lineage.json").read_text(encoding="utf-8"))
    session = lineage["steps"]["取词"]
    rows = json.loads((project / "runs/manifest.json").read_text(encoding="utf-8"))
    assert len(rows) == 1, rows
    assert rows[0]["step"] == "取词"
    assert rows[0]["ok"] is False
    assert rows[0]["error"] == "cancelled"
    assert rows[0]["session_id"] == session

    # The next run continues the cancelled session.
    model = start_fake()
    for key, value in model.env().items():
        monkeypatch.setenv(key, value)
    with Runtime(workspace=".", run_dir="runs") as again:
        ctx = await Workflow([Step("取词", terse(), PROMPT)]).run(again)
    assert ctx["_woke"] == 2
    assert ctx["_sessions"]["取词"] == session
    assert ctx["取词"] == WORD


async def test_an_event_callback_that_raises_stops_the_run_and_raises(project, fake):
    events = []

    def on_event(event: dict) -> None:
        events.append(event)
        if event["type"] == "tool_call":
            raise ValueError("drawing failed")

    rt = Runtime(on_event=on_event)
    with pytest.raises(ValueError, match="drawing failed"):
        await Workflow([Step("取词", terse(), PROMPT)]).run(rt)
    rt.close()
    types = [e["type"] for e in events]
    assert types[:2] == ["step", "session"]
    assert "tool_call" in types and "turn" in types
    # Stopped at the next await: the answer after the tool call never arrived.
    assert "text" not in types[types.index("tool_call"):]
    rows = json.loads((project / "runs/manifest.json").read_text(encoding="utf-8"))
    assert rows[0]["ok"] is False
    assert rows[0]["error"] == "stopped: ValueError: drawing failed"
    Runtime().close()  # and the lock is free again


async def test_a_prompt_function_that_raises_sends_nothing_and_raises(project, fake):
    def broken(ctx: dict) -> str:
        raise KeyError("no such step")

    with Runtime() as rt:
        with pytest.raises(KeyError):
            await Workflow([Step("取词", terse(), PROMPT), Step("下一步", terse(), broken)]).run(rt)
    assert fake.count == 2, "only the first step's two requests"
    lineage = json.loads((project / "runs/lineage.json").read_text(encoding="utf-8"))
    assert list(lineage["steps"]) == ["取词"]


# Each event type's fields, in order, as `on_event` gets them.
EVENT_FIELDS = {
    "step": ["type", "step", "index", "total", "resumed", "woke"],
    "session": ["type", "agent", "session_id", "resumed", "depth"],
    "requesting": ["type", "depth"],
    "text": ["type", "text", "depth"],
    "tool_call": ["type", "name", "summary", "depth", "id"],
    "tool_done": ["type", "name", "is_error", "interrupted", "depth", "id"],
    "turn": ["type", "turn", "usage", "context", "cost_usd", "model", "depth"],
    "attempt_done": ["type", "step", "ok", "error", "attempts"],
}


async def test_on_session_hears_each_steps_session_and_events_cover_turns(project, fake):
    sessions = []
    events = []
    rt = Runtime(on_session=lambda step, sid: sessions.append((step, sid)), on_event=events.append)
    try:
        ctx = await Workflow([Step("取词", terse(), PROMPT)]).run(rt)
    finally:
        rt.close()
    assert sessions == [("取词", ctx["_sessions"]["取词"])]
    types = [e["type"] for e in events]
    assert types.count("turn") == 2
    assert {"step", "session", "text", "tool_call", "tool_done", "turn"} <= set(types)
    for event in events:
        assert list(event) == EVENT_FIELDS[event["type"]], event
    step = events[types.index("step")]
    assert step == {"type": "step", "step": "取词", "index": 1, "total": 1, "resumed": False, "woke": 1}
    session = events[types.index("session")]
    assert session["session_id"] == ctx["_sessions"]["取词"] and session["depth"] == 0
    call = events[types.index("tool_call")]
    assert call["name"] == "Read" and call["depth"] == 0
    turn = events[types.index("turn")]
    assert turn["turn"] == 1 and isinstance(turn["usage"], dict)
    assert isinstance(turn["usage"]["input_tokens"], int) and isinstance(turn["context"], int)
    assert turn["cost_usd"] is None or isinstance(turn["cost_usd"], float)


def test_a_bad_setting_is_a_config_error_before_anything_is_written(project, fake, monkeypatch):
    from flower import ConfigError

    monkeypatch.setenv("FLOWER_MAX_ATTEMPTS", "many")
    with pytest.raises(ConfigError, match="FLOWER_MAX_ATTEMPTS"):
        Runtime()
    monkeypatch.delenv("FLOWER_MAX_ATTEMPTS")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        Runtime()
    assert not (project / "runs").exists()


async def test_one_workflow_at_a_time_on_a_runtime(project, start_fake, monkeypatch):
    held = start_fake(hold=[1])
    for key, value in held.env().items():
        monkeypatch.setenv(key, value)
    rt = Runtime()
    wf = Workflow([Step("取词", terse(), PROMPT)])
    first = asyncio.ensure_future(wf.run(rt))
    with pytest.raises(FlowerError, match="already running"):
        wf.run(rt)
    first.cancel()
    rt.close()
    assert rt.closed
    with pytest.raises(FlowerError, match="closed"):
        wf.run_sync(rt)
