"""Bad arguments are refused when the object is constructed, as TypeError, ValueError or
ConfigError naming the argument and the value, before anything runs or is written."""

from __future__ import annotations

import os
import threading

import flower
import pytest
from conftest import TIMEOUT

from flower import AgentSpec, ConfigError, FlowerError, LockedError, Runtime, Step, Workflow


def spec(**kwargs) -> AgentSpec:
    return AgentSpec(name="terse", instructions="回答极简。", **kwargs)


def test_a_workspace_that_does_not_exist_is_named(project, fake):
    with pytest.raises(ConfigError) as refused:
        Runtime(workspace="/nonexistent/proj")
    assert "/nonexistent/proj" in str(refused.value)
    assert isinstance(refused.value, FlowerError)
    (project / "a-file").write_text("x", encoding="utf-8")
    with pytest.raises(ConfigError, match="is not a directory"):
        Runtime(workspace="a-file")
    assert not (project / "runs").exists()


def test_a_str_for_a_list_of_rules_is_a_type_error():
    with pytest.raises(TypeError, match=r"allowed_tools must be a list of str, not a str: write allowed_tools=\[\"Read\"\]"):
        spec(allowed_tools="Read")
    with pytest.raises(TypeError, match=r"disallowed_tools\[1\] must be a str, not int: 3"):
        spec(disallowed_tools=["Bash", 3])
    assert spec(allowed_tools=("Read", "Glob")).allowed_tools == ["Read", "Glob"]


def test_a_turn_limit_below_one_is_a_value_error():
    for bad in (-1, 0, 2**40):
        with pytest.raises(ValueError, match=f"max_turns must be at least 1 .*got {bad}"):
            spec(max_turns=bad)
    with pytest.raises(TypeError, match="max_turns must be an int or None, not str"):
        spec(max_turns="3")
    assert spec(max_turns=None).max_turns is None
    assert spec(max_turns=4).max_turns == 4
    with pytest.raises(ValueError, match="retries must be at least 0, got -1"):
        Step("取词", spec(), "a", retries=-1)
    assert Step("取词", spec(), "a", retries=2).retries == 2


def test_a_rule_that_does_not_parse_is_refused_before_any_run(project):
    with pytest.raises(ValueError, match=r"allowed_tools\[1\] = \"Bash\(\" is not a permission rule"):
        spec(allowed_tools=["Read", "Bash("])
    with pytest.raises(ValueError, match=r"disallowed_tools\[0\] = \"Bash\(\)\""):
        spec(disallowed_tools=["Bash()"])
    assert not (project / "runs").exists()


def test_a_workflow_needs_steps_with_distinct_names():
    with pytest.raises(ValueError, match="needs at least one Step"):
        Workflow([])
    with pytest.raises(ValueError, match="two steps are named '取词'|two steps are named \"取词\""):
        Workflow([Step("取词", spec(), "a"), Step("取词", spec(), "b")])
    with pytest.raises(TypeError, match=r"steps\[1\] must be a Step, not str"):
        Workflow([Step("取词", spec(), "a"), "再说"])
    with pytest.raises(TypeError, match="not a str"):
        Workflow("取词")


def test_a_rule_spoiled_after_construction_is_refused_by_the_workflow(project):
    agent = spec(allowed_tools=["Read"])
    agent.allowed_tools = ["Bash("]
    with pytest.raises(ValueError, match="is not a permission rule"):
        Workflow([Step("取词", agent, "a")])


async def test_run_sync_inside_a_running_loop_is_refused(project, fake):
    with Runtime() as rt:
        workflow = Workflow([Step("取词", spec(allowed_tools=["Read"]), "读 seed.txt")])
        with pytest.raises(RuntimeError, match=r"cannot be called from a running event loop.*await workflow.run\(rt\)"):
            workflow.run_sync(rt)
    assert fake.count == 0, "nothing was sent"


def test_a_second_runtime_in_this_process_is_told_to_close_the_first(project, fake):
    with Runtime() as first:
        with pytest.raises(LockedError) as refused:
            Runtime()
        message = str(refused.value)
        assert "already open in this process" in message, message
        assert f"kill {os.getpid()}" not in message, message
        # Waiting would wait for this very process: refused at once as well.
        waited: list[BaseException] = []

        def wait_for_it() -> None:
            try:
                Runtime(wait=True).close()
            except BaseException as e:  # noqa: BLE001 - what was raised is the result
                waited.append(e)

        waiter = threading.Thread(target=wait_for_it, daemon=True)
        waiter.start()
        waiter.join(TIMEOUT)
        assert not waiter.is_alive(), "Runtime(wait=True) waits for its own process"
        assert isinstance(waited[0], LockedError) and "already open in this process" in str(waited[0])
        assert not first.closed
    with Runtime():
        pass


def test_resilience_defaults_are_the_cores():
    # Left out, each number is the core's default (Resilience::default()); given, it is kept.
    core = flower.Resilience()
    assert (core.max_attempts, core.base_delay, core.max_delay) == (6, 4.0, 120.0)
    assert (core.probe_timeout, core.probe_interval, core.max_offline_wait) == (5.0, 15.0, 3600.0)
    assert core.retry_unknown is True
    given = flower.Resilience(max_attempts=2, retry_unknown=False)
    assert (given.max_attempts, given.retry_unknown, given.max_delay) == (2, False, 120.0)


def test_a_retry_variable_wins_over_a_default_and_a_given_number_over_the_variable(
    project, fake, monkeypatch
):
    monkeypatch.setenv("FLOWER_MAX_ATTEMPTS", "3")
    monkeypatch.setenv("FLOWER_BASE_DELAY", "0.5")
    with Runtime() as rt:
        assert (rt.resilience.max_attempts, rt.resilience.base_delay) == (3, 0.5)
    # Given numbers win; those left out stay the variables' (or the defaults).
    given = flower.Resilience(max_attempts=2)
    given.max_delay = 7.0
    with Runtime(resilience=given) as rt:
        used = rt.resilience
        assert (used.max_attempts, used.base_delay, used.max_delay) == (2, 0.5, 7.0)
        assert used.probe_interval == flower.Resilience().probe_interval
    # A bad variable is refused as for the CLI, even with a Resilience given.
    monkeypatch.setenv("FLOWER_MAX_ATTEMPTS", "many")
    with pytest.raises(ConfigError, match="FLOWER_MAX_ATTEMPTS"):
        Runtime(resilience=flower.Resilience(base_delay=1.0))


def test_counts_below_their_minimum_are_value_errors_naming_the_value(project, fake):
    with pytest.raises(ValueError, match=r"keep_denials must be at least 0.*-1"):
        Runtime(keep_denials=-1)
    with pytest.raises(TypeError, match="keep_denials must be an int"):
        Runtime(keep_denials="2")
    assert not (project / "runs").exists()
    with pytest.raises(ValueError, match=r"max_attempts must be at least 1.*0"):
        flower.Resilience(max_attempts=0)
    with pytest.raises(ValueError, match="max_attempts"):
        flower.Resilience(max_attempts=-3)
    assert flower.Resilience(max_attempts=None).max_attempts == flower.Resilience().max_attempts
