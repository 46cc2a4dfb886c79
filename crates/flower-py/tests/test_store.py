"""flower's stores as a Claude Agent SDK SessionStore, proven by the SDK's own suite."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import uuid

import pytest
from claude_agent_sdk.testing import run_session_store_conformance

from flower import PostgresSessionStore, PruningSessionStore, SqliteSessionStore


async def test_sqlite_store_passes_the_sdk_conformance_suite(tmp_path):
    n = itertools.count()
    await run_session_store_conformance(lambda: SqliteSessionStore(tmp_path / f"{next(n)}/sessions.db"))


async def test_pruning_store_passes_the_sdk_conformance_suite(tmp_path):
    n = itertools.count()

    def make():
        i = next(n)
        inner = SqliteSessionStore(tmp_path / f"{i}/sessions.db")
        return PruningSessionStore(inner, trim_dir=tmp_path / f"{i}/trimmed")

    await run_session_store_conformance(make)


def _fresh_postgres_url() -> str:
    base = os.environ.get("FLOWER_TEST_POSTGRES_URL", "").strip()
    if not base or not shutil.which("psql"):
        why = "FLOWER_TEST_POSTGRES_URL is not set or psql is missing (.ci/run starts a server and sets it)"
        # As in the Rust suite: where CI started the server, a skip is a failure.
        if "postgres" in os.environ.get("FLOWER_TEST_REQUIRE", "").split(","):
            pytest.fail(why)
        pytest.skip(why)
    schema = f"t_{uuid.uuid4().hex}"
    subprocess.run(["psql", base, "-q", "-c", f"CREATE SCHEMA {schema}"], check=True)
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema}"


async def test_postgres_store_passes_the_sdk_conformance_suite():
    _fresh_postgres_url()  # skips without a server
    await run_session_store_conformance(lambda: PostgresSessionStore(_fresh_postgres_url()))


async def test_pruning_postgres_store_passes_the_sdk_conformance_suite(tmp_path):
    _fresh_postgres_url()
    await run_session_store_conformance(
        lambda: PruningSessionStore(PostgresSessionStore(_fresh_postgres_url()), trim_dir=tmp_path / "trimmed")
    )


async def test_load_through_pruning_drops_synthetic_api_errors(tmp_path):
    raw = SqliteSessionStore(tmp_path / "sessions.db")
    key = {"project_key": "p", "session_id": str(uuid.uuid4())}
    user = {"type": "user", "uuid": "u1", "parentUuid": None, "message": {"role": "user", "content": "hi"}}
    error = {
        "type": "assistant",
        "uuid": "a1",
        "parentUuid": "u1",
        "isApiErrorMessage": True,
        "message": {"role": "assistant", "model": "<synthetic>", "content": [{"type": "text", "text": "API Error: Can't reach the API server"}]},
    }
    await raw.append(key, [user, error])
    assert len(await raw.load(key)) == 2
    pruned = await PruningSessionStore(raw, trim_dir=tmp_path / "trimmed").load(key)
    assert [e["uuid"] for e in pruned] == ["u1"], "the synthetic error is not fed back"
    assert len(await raw.load(key)) == 2, "and it is still stored"
