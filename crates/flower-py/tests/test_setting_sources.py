"""Runtime(setting_sources=…): the Agent SDK's option. Left out (its default), no file
is read: no memory, no settings, no skills. Given, the files of those sources as the CLI
reads them: memory, settings (a deny rule), agents, skills (issue #45 item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flower import AgentSpec, Runtime, Step, Workflow

PROMPT = "读 seed.txt,只回文件里那个词。"


def agent() -> AgentSpec:
    return AgentSpec(name="reader", instructions="回答极简。", max_turns=4)


@pytest.fixture
def conventions(project: Path, tmp_path_factory, monkeypatch) -> Path:
    """The project's and the user's files, one mark each; HOME is a home of its own."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    (project / "CLAUDE.md").write_text("PROJECT-MEMORY-MARK\n", encoding="utf-8")
    (project / "CLAUDE.local.md").write_text("LOCAL-MEMORY-MARK\n", encoding="utf-8")
    (home / ".claude").mkdir()
    (home / ".claude/CLAUDE.md").write_text("USER-MEMORY-MARK\n", encoding="utf-8")
    (project / ".claude/skills/release").mkdir(parents=True)
    (project / ".claude/skills/release/SKILL.md").write_text(
        "---\nname: release\ndescription: PROJECT-SKILL-MARK how we cut a release\n---\nsteps\n",
        encoding="utf-8",
    )
    (project / ".claude/settings.json").write_text(
        json.dumps({"permissions": {"deny": ["Read(seed.txt)"]}}), encoding="utf-8"
    )
    (project / ".claude/agents").mkdir()
    (project / ".claude/agents/reviewer.md").write_text(
        "---\nname: reviewer\ndescription: PROJECT-AGENT-MARK reviews\ntools: Read\n---\nreview\n",
        encoding="utf-8",
    )
    return home


def run(project: Path, start_fake, monkeypatch, **options) -> list[dict]:
    """One step against a fake that records its requests; the request bodies."""
    record = project.parent / f"requests-{len(list(project.parent.glob('requests-*')))}.jsonl"
    server = start_fake(record=str(record))
    for key, value in server.env().items():
        if key.startswith(("ANTHROPIC_", "FLOWER_")):
            monkeypatch.setenv(key, value)
    with Runtime(**options) as rt:
        Workflow([Step("取词", agent(), PROMPT)]).run_sync(rt)
    return [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]


def system(body: dict) -> str:
    return json.dumps(body["system"], ensure_ascii=False)


def test_by_default_no_file_is_read(project, conventions, start_fake, monkeypatch):
    bodies = run(project, start_fake, monkeypatch)
    text = json.dumps(bodies, ensure_ascii=False)
    for mark in ["PROJECT-MEMORY-MARK", "USER-MEMORY-MARK", "PROJECT-SKILL-MARK", "PROJECT-AGENT-MARK"]:
        assert mark not in text, mark
    # No deny rule: the Read of seed.txt ran.
    assert "向日葵" in json.dumps(bodies[1]["messages"], ensure_ascii=False)


def test_project_reads_the_projects_files_as_the_cli_does(project, conventions, start_fake, monkeypatch):
    bodies = run(project, start_fake, monkeypatch, setting_sources=["project"])
    first = system(bodies[0])
    assert "PROJECT-MEMORY-MARK" in first
    assert "- release: PROJECT-SKILL-MARK how we cut a release" in first
    assert "USER-MEMORY-MARK" not in first and "LOCAL-MEMORY-MARK" not in first
    assert "Skill" in [tool["name"] for tool in bodies[0]["tools"]]
    task = [tool for tool in bodies[0]["tools"] if tool["name"] == "Task"]
    assert task and "PROJECT-AGENT-MARK" in task[0]["description"]
    # The project's deny rule refused the Read.
    results = [
        block
        for message in bodies[1]["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert results and results[0].get("is_error") is True, results


def test_all_three_sources(project, conventions, start_fake, monkeypatch):
    bodies = run(project, start_fake, monkeypatch, setting_sources=["user", "project", "local"])
    first = system(bodies[0])
    for mark in ["USER-MEMORY-MARK", "PROJECT-MEMORY-MARK", "LOCAL-MEMORY-MARK", "PROJECT-SKILL-MARK"]:
        assert mark in first, mark


def test_a_source_the_sdk_does_not_have_is_a_value_error(project):
    with pytest.raises(ValueError, match="setting_sources"):
        Runtime(setting_sources=["team"])
    with pytest.raises(TypeError):
        Runtime(setting_sources="project")
