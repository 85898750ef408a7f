"""Runs checkpointed in a real Postgres (a team's shared store): a diagnosis that stops at an approval in one
Diagnoser is answered and finished by another, nothing is written to the SQLite file, and an unreachable store is
a clear error that does not show the password."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent.checkpoints import CheckpointStoreError
from agent.diagnosis import Diagnoser
from agent.incident import Incident
from agent.options import DiagnoseOptions
from agent.reasoning.offline import OfflineReasoner
from agent.runs import runs_dir
from agent.sim.scenario import create_scenario
from agent.taxonomy import load_taxonomy
from tests.chroma_server import free_port
from tests.hashed_words import word_embed
from tests.postgres_server import running_postgres

TAXONOMY = load_taxonomy()
ECC_TEXT = "RuntimeError: CUDA error: uncorrectable ECC error encountered on local rank 1."


@pytest.fixture(scope="module")
def postgres_url() -> Any:
    with running_postgres() as url:
        yield url


def diagnoser(options: DiagnoseOptions) -> Diagnoser:
    return Diagnoser(options, taxonomy=TAXONOMY, reasoner=OfflineReasoner(TAXONOMY, embed=word_embed))


def test_a_run_waiting_for_approval_is_finished_by_another_diagnoser_from_postgres(postgres_url: str,
                                                                                   tmp_path: Path) -> None:
    # two independent causes the incident names: ranking them is what the load tests are asked for
    faults = [{"fault": "gpu.ecc_uncorrectable", "gpu": 1}, {"fault": "nvlink.link_down", "gpu": 5}]
    host = f"sim:{create_scenario(tmp_path / 'host', faults, []).root}"
    options = DiagnoseOptions(hosts=[host], data_dir=str(tmp_path / "data"), history=False, knowledge=False,
                              approval="ask", checkpoint_url=postgres_url)
    first = diagnoser(options)
    with pytest.raises(RuntimeError, match="stopped for approval"):
        first.run(Incident(text=ECC_TEXT + " NCCL also logged NVLink errors, Xid 74 on GPU 5."), run_id="pg-run")
    first.close()

    asked: list[dict[str, Any]] = []

    def decline(payload: dict[str, Any]) -> dict[str, bool]:
        asked.append(payload)
        return {check["id"]: False for check in payload["checks"]}

    second = diagnoser(options)
    report = second.resume("pg-run", decline)
    second.close()
    assert asked and asked[0]["kind"] == "approval"
    assert report.resolved and "GPU.MEMORY.UNCORRECTABLE_ECC" in [c.label for c in report.root_causes]
    assert not (runs_dir(options) / "checkpoints.sqlite").exists()
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = %s", ("pg-run",)).fetchone()
    assert rows is not None and rows[0] > 0


def test_an_unreachable_store_is_a_clear_error_without_the_password(tmp_path: Path) -> None:
    url = f"postgresql://ops:s3cret-pw@127.0.0.1:{free_port()}/aidai"
    with pytest.raises(CheckpointStoreError) as caught:
        diagnoser(DiagnoseOptions(data_dir=str(tmp_path), checkpoint_url=url))
    assert "cannot reach the Postgres checkpoint store postgresql://127.0.0.1" in str(caught.value)
    assert "s3cret" not in str(caught.value) and "ops" not in str(caught.value)
    with pytest.raises(CheckpointStoreError, match="expected postgresql://"):
        diagnoser(DiagnoseOptions(data_dir=str(tmp_path), checkpoint_url="mysql://db/aidai"))
