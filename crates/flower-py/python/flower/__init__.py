"""flower: a harness for long-running LLM coding agents that never loses a conversation.

The Python API of the contract page (接续): ``Workflow``, ``Step``, ``AgentSpec``,
``Runtime``, ``wake_state``, ``Lineage``, ``Resilience`` and the session stores, all
on the Rust core (the ``flower._flower`` extension); nothing is re-implemented here.
"""

from ._flower import (
    RESUME_PROMPT,
    AgentSpec,
    ConfigError,
    FlowerError,
    Lineage,
    LockedError,
    PostgresSessionStore,
    PruningSessionStore,
    Resilience,
    Runtime,
    SessionStore,
    SqliteSessionStore,
    Step,
    StepFailedError,
    Workflow,
    wake_state,
)

__version__ = "0.1.0"

__all__ = [
    "RESUME_PROMPT",
    "AgentSpec",
    "ConfigError",
    "FlowerError",
    "Lineage",
    "LockedError",
    "PostgresSessionStore",
    "PruningSessionStore",
    "Resilience",
    "Runtime",
    "SessionStore",
    "SqliteSessionStore",
    "Step",
    "StepFailedError",
    "Workflow",
    "wake_state",
]
