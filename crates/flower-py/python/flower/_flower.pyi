"""Type stubs of the Rust extension (crates/flower-py/src): what an editor completes."""

from collections.abc import Awaitable, Callable, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, ClassVar, Literal, TypedDict

StrPath = str | PathLike[str]

RESUME_PROMPT: str
"""What a retry that continues its session says (names no error)."""

class FlowerError(Exception):
    """Every error flower raises."""

class LockedError(FlowerError):
    """The run (or one of its sessions) is held by another process: the CLI or Python.
    The message is the CLI's line, e.g. `另一个 flower 正在这里运行(pid N,HH:MM 起)。…`."""

class ConfigError(FlowerError):
    """A setting cannot be used (a bad FLOWER_* value, no ANTHROPIC_API_KEY); nothing
    was sent or written."""

class StepFailedError(FlowerError):
    """A step failed after its retries."""

    step: str
    error: str
    context: dict[str, Any]
    """The context so far (as `Workflow.run` returns it)."""

class AgentSpec:
    """An agent: name, instructions (system prompt), the tools it may use as permission
    rules (`"Read"`, `"Bash(git status)"`), a turn limit, a model. A str where a list
    belongs, a rule that does not parse or `max_turns` below 1 raise TypeError or
    ValueError here."""

    name: str
    instructions: str
    allowed_tools: list[str]
    disallowed_tools: list[str]
    max_turns: int | None
    model: str | None
    def __init__(
        self,
        name: str,
        instructions: str,
        allowed_tools: Sequence[str] = ...,
        disallowed_tools: Sequence[str] = ...,
        max_turns: int | None = None,
        model: str | None = None,
    ) -> None: ...

Context = dict[str, Any]
"""`{"_woke": int, "_sessions": {step: session_id}, "<step>": output text,
"_results": [manifest rows of this process], "_passed": {step: bool}}`."""

Prompt = str | Callable[[Context], str]

class Step:
    """One step. `name` is lineage's key across processes (renaming it starts fresh).
    `prompt` is a string or a function of the context. `resume_from` continues an
    earlier step's session (`fork=True` branches it). `resume_prompt` is said when this
    step's own session is continued in a later process (default: `prompt`)."""

    name: str
    agent: AgentSpec
    prompt: Prompt
    resume_from: str | None
    fork: bool
    resume_prompt: Prompt | None
    retries: int
    def __init__(
        self,
        name: str,
        agent: AgentSpec,
        prompt: Prompt,
        *,
        resume_from: str | None = None,
        fork: bool = False,
        resume_prompt: Prompt | None = None,
        retries: int = 0,
    ) -> None: ...

class Workflow:
    """Steps in order. `continuous=True` (the default): each step continues across
    processes the session lineage remembers for its name; False: every process starts
    each step in a new session. No steps, or two steps of one name, raise ValueError."""

    steps: list[Step]
    continuous: bool
    def __init__(self, steps: Sequence[Step], continuous: bool = True) -> None: ...
    def run(self, rt: Runtime) -> Awaitable[Context]:
        """Runs every step on the running asyncio loop (never blocking it; the GIL is
        released across model requests). Cancelling the task stops the run: running
        commands killed, the in-flight step's manifest row written (`error="cancelled"`),
        lineage already on disk. An exception raised by a prompt function or a callback
        stops the run the same way and is raised here."""
    def run_sync(self, rt: Runtime) -> Context:
        """`run` for a script without an event loop. Ctrl-C stops the run as
        cancellation does and raises KeyboardInterrupt. Called while an asyncio loop
        runs in this thread it raises RuntimeError (it would block the loop)."""

class Event(TypedDict, total=False):
    type: Literal[
        "session", "text", "thinking", "tool_call", "tool_denied", "tool_done", "turn",
        "retrying", "offline", "online", "offline_wait_interrupted", "warning", "step",
        "handoff", "step_skipped", "attempt_done", "judged",
    ]

class Resilience:
    """Retry and offline-wait numbers, over the FLOWER_MAX_ATTEMPTS … variables."""

    resume_prompt: ClassVar[str]
    max_attempts: int
    base_delay: float
    max_delay: float
    probe_timeout: float
    probe_interval: float
    max_offline_wait: float
    retry_unknown: bool
    def __init__(
        self,
        *,
        max_attempts: int | None = None,
        base_delay: float | None = None,
        max_delay: float | None = None,
        probe_timeout: float | None = None,
        probe_interval: float | None = None,
        max_offline_wait: float | None = None,
        retry_unknown: bool | None = None,
    ) -> None:
        """Only the numbers given (here or by setting an attribute later) are kept: a
        Runtime lays them over its settings, so they win over the FLOWER_* variables,
        which win over the defaults. Read, a number not given is the core's default:
        6 attempts, 4 s doubling to 120 s, probes of 5 s every 15 s, offline waits up
        to an hour, unknown errors retried."""

class WakeState(TypedDict):
    waking: bool
    brief: str | None
    goal: str | None
    checks: int
    woke: int
    steps: dict[str, str]

class Runtime:
    """One open run of `workspace` with `run_dir` (relative to the current directory,
    not to the workspace). Takes the run lock (shared with the `flower` CLI) until
    `close()`; raises LockedError when another process holds it (`wait=True` waits),
    ConfigError for a bad setting. Settings come from the environment as for `flower`.
    `trim`, `ephemeral`, `keep_denials`: what a resumed session is fed (left out: the
    core's defaults, as for the CLI: no trimming, ephemeral content pruned, one denial kept).
    `on_event(event)` hears turns, tool calls, handoffs, outage waits …;
    `on_session(step, session_id)` each step's session the moment it exists.
    `setting_sources`: the Agent SDK's option, which files are read, as the CLI reads
    them: `"user"` (`~/.claude`: settings, CLAUDE.md, agents, skills), `"project"` (the
    workspace's `.claude/settings.json`, `.mcp.json`, CLAUDE.md/AGENTS.md, agents,
    skills), `"local"` (`.claude/settings.local.json`, CLAUDE.local.md); left out (the
    SDK's default), none, memory included. A workspace file changed since the run
    pinned it raises unless `accept_settings=True`."""

    workspace: Path
    run_dir: Path
    resilience: Resilience
    """The retry numbers this runtime uses: each one given in `resilience=`, else the
    FLOWER_* variable's, else the core's default."""
    def __init__(
        self,
        workspace: StrPath = ".",
        run_dir: StrPath = "runs",
        *,
        trim: bool | None = None,
        ephemeral: bool | None = None,
        keep_denials: int | None = None,
        on_session: Callable[[str, str], object] | None = None,
        on_event: Callable[[Event], object] | None = None,
        resilience: Resilience | None = None,
        wait: bool = False,
        setting_sources: list[Literal["user", "project", "local"]] | None = None,
        accept_settings: bool = False,
        enable_file_checkpointing: bool = True,
    ) -> None: ...
    def checkpoints(self) -> list[dict[str, Any]]:
        """The workspace's checkpoints, oldest first (`n`, `kind`, `step`, `session_id`,
        `turn`, `time`, `tree`): one before each step attempt, one after each turn that
        may have changed files. None when `enable_file_checkpointing=False`."""
    def rewind(self, point: int | str, *, files_only: bool = False, discard: bool = False) -> dict[str, Any]:
        """`flower rewind POINT`: the files and (unless `files_only`) the conversation
        back to a checkpoint (its number, or a step attempt's name). Returns `point`,
        `files` (paths restored) and `sessions` (step: the fork now continued, or None
        when the step starts afresh). Raises FlowerError when the workspace changed
        outside flower since the last checkpoint (unless `discard`)."""
    def rewind_files(self, user_message_id: str, *, discard: bool = False) -> dict[str, Any]:
        """The Agent SDK's name: the files back to the last checkpoint taken before
        that message of one of the run's sessions was written; the conversation stays."""
    @property
    def project_key(self) -> str:
        """The key the run's sessions are stored under (for `store.load`)."""
    def has_session(self, session_id: str) -> bool:
        """Whether the session is still in the run's store."""
    def rescue(self) -> None:
        """What the CLI does on SIGTERM/SIGHUP before dying: the in-flight step's
        manifest row written (`error="killed-by-signal"`), running commands killed. For
        a handler installed with `signal.signal`; the package installs none."""
    @property
    def wake(self) -> WakeState:
        """The wake state the run was opened with."""
    @property
    def store(self) -> SessionStore:
        """The run's store (pruning on load) as an Agent SDK SessionStore."""
    @property
    def closed(self) -> bool: ...
    def close(self) -> None:
        """Releases the run lock (stopping a run still going on this runtime)."""
    def __enter__(self) -> Runtime: ...
    def __exit__(self, *exc: object) -> None: ...

def wake_state(workspace: StrPath = ".", run_dir: StrPath = "runs") -> WakeState:
    """The read-only wake probe; writes not one byte."""

class Lineage:
    """`run_dir/lineage.json`: step name → session id, and the wake count."""

    def __init__(self, run_dir: StrPath = "runs", workspace: StrPath = ".") -> None: ...
    def remember(self, step: str, session_id: str) -> bool:
        """Records and writes at once; suffixed names (`#retry`, `#round`, `·判定#`)
        never enter."""
    def archive(self, into: StrPath, extra: Sequence[StrPath] = ...) -> None:
        """Moves lineage.json and the existing `extra` files into `into`; resets."""
    @property
    def woke(self) -> int: ...
    @property
    def steps(self) -> dict[str, str]: ...
    @property
    def path(self) -> Path: ...

class SessionKey(TypedDict, total=False):
    project_key: str
    session_id: str
    subpath: str

class SessionStore:
    """The Claude Agent SDK's SessionStore protocol on a flower store."""

    async def append(self, key: SessionKey, entries: list[dict[str, Any]]) -> None: ...
    async def load(self, key: SessionKey) -> list[dict[str, Any]] | None: ...
    async def list_sessions(self, project_key: str) -> list[dict[str, Any]]: ...
    async def list_session_summaries(self, project_key: str) -> list[dict[str, Any]]: ...
    async def delete(self, key: SessionKey) -> None: ...
    async def list_subkeys(self, key: SessionKey) -> list[str]: ...
    def has_session(self, session_id: str) -> bool: ...

class SqliteSessionStore(SessionStore):
    def __init__(self, path: StrPath) -> None: ...

class PostgresSessionStore(SessionStore):
    def __init__(self, url: str) -> None: ...

class PruningSessionStore(SessionStore):
    """`load` feeds back what a resumed session should see; storage is untouched."""

    def __init__(
        self,
        inner: SessionStore,
        *,
        trim: bool = False,
        ephemeral: bool = True,
        keep_denials: int = 1,
        trim_dir: StrPath | None = None,
    ) -> None: ...

