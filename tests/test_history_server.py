"""Team scale: the incident DB on a real Chroma server (started from the venv's `chroma` CLI on loopback), with
history imported and resolved incidents added by two users' clients, and retrieval through the server."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from agent.cli import history_cmd
from agent.knowledge.incident_db import IncidentDB

FIX = Path(__file__).parent / "fixtures" / "history"
cli = typer.Typer()
cli.add_typer(history_cmd.app, name="history")


@pytest.mark.slow
def test_import_and_retrieval_through_a_chroma_server(chroma_server: str, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["history", "import", str(FIX / "history.csv"), "--chroma-url", chroma_server,
                                 "--skip-bad"])
    assert result.exit_code == 1 and "line 4" in result.output  # the bad row is listed, the two good ones in
    assert f"Chroma server {chroma_server}: 2 imported" in result.output
    result = runner.invoke(cli, ["history", "add-resolved", str(FIX / "ticket_resolved.json"), "--chroma-url",
                                 chroma_server, "--archive", str(tmp_path / "archive.jsonl")])
    assert result.exit_code == 0, result.output
    other_user = IncidentDB(url=chroma_server)  # another client of the same server sees both writes
    assert other_user.location.url == chroma_server and other_user.count() == 3
    hits = other_user.query("NCCL cannot find a socket interface: NCCL_SOCKET_IFNAME names a missing NIC", k=2)
    assert hits[0].label == "INTERCONNECT_NETWORKING.SOCKET.IFNAME_MISCONFIG" and 0.0 < hits[0].score <= 1.0
    hits = other_user.query("GPU 1 uncorrectable ECC error, Xid 48, inference server crashed", k=1)
    assert [h.id for h in hits] == ["resolved-20251120-abc123"]
