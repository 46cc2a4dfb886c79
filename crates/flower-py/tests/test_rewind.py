"""Checkpoints and rewind from Python (#44): `Runtime.checkpoints()`, the Agent SDK's
`rewind_files(user_message_id)`, `enable_file_checkpointing=False`."""

from __future__ import annotations

import os

import pytest
from conftest import WORD

from flower import AgentSpec, FlowerError, Runtime, Step, Workflow


def writer() -> AgentSpec:
    return AgentSpec(
        name="writer",
        instructions="照做。",
        allowed_tools=["Write"],
        max_turns=4,
    )


@pytest.fixture
def writing_fake(start_fake, monkeypatch):
    """A model that writes made.txt once, then answers."""
    server = start_fake(write={"file_path": "made.txt", "content": "made\n"})
    for key in list(os.environ):
        if key.startswith(("ANTHROPIC_", "FLOWER_")):
            monkeypatch.delenv(key)
    for key, value in server.env().items():
        if key.startswith(("ANTHROPIC_", "FLOWER_")):
            monkeypatch.setenv(key, value)
    return server


async def test_rewind_files_takes_the_files_back_to_a_user_message(project, writing_fake):
    rt = Runtime(workspace=".", run_dir="runs")
    try:
        ctx = await Workflow([Step("写", writer(), "写 made.txt")]).run(rt)
        assert (project / "made.txt").read_text(encoding="utf-8") == "made\n"
        points = rt.checkpoints()
        assert [(p["kind"], p["step"]) for p in points] == [("attempt", "写"), ("turn", "写")]

        key = {"project_key": rt.project_key, "session_id": ctx["_sessions"]["写"]}
        entries = await rt.store.load(key)
        prompt = next(e for e in entries if e["type"] == "user")
        rewound = rt.rewind_files(prompt["uuid"])
        assert rewound["point"]["n"] == points[0]["n"]
        assert rewound["files"] == 1
        assert rewound["sessions"] == {}, "files only: the conversation stays"
        assert not (project / "made.txt").exists()
        assert (project / "seed.txt").read_text(encoding="utf-8") == WORD + "\n"

        # And back again by number: the rewind recorded the state it left.
        before = next(p for p in rt.checkpoints() if p["step"] == "回退前的样子")
        rt.rewind(before["n"], files_only=True)
        assert (project / "made.txt").read_text(encoding="utf-8") == "made\n"

        with pytest.raises(FlowerError, match="没有消息"):
            rt.rewind_files("00000000-0000-4000-8000-000000000000")
    finally:
        rt.close()


def test_without_file_checkpointing_there_is_nothing_to_rewind(project, writing_fake):
    with Runtime(workspace=".", run_dir="runs", enable_file_checkpointing=False) as rt:
        Workflow([Step("写", writer(), "写 made.txt")]).run_sync(rt)
        assert rt.checkpoints() == []
        with pytest.raises(FlowerError, match="没有检查点"):
            rt.rewind_files("00000000-0000-4000-8000-000000000000")
    assert not (project / "runs/checkpoints").exists()
