"""Ticket export: Markdown/JSON files written whole, and a webhook POST with a configurable template, against a
real HTTP receiver on 127.0.0.1 (2xx, an error status, a receiver that never answers); and the CLI flags."""

from __future__ import annotations

import json
import socket
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.report import Report
from agent.ticket import ticket_data, write_formats
from agent.ticket_export import ExportError, check_url, load_template, post, render_body

SECRET = "sk-proj-abcdefghijklmnopqrstuvwx"


class Receiver:
    """A ticket system's webhook endpoint: records each POST and answers `status`."""

    def __init__(self, status: int = 201, answer: str = '{"id": "TICKET-1"}'):
        self.status, self.answer = status, answer
        self.posts: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.posts.append({"path": self.path, "type": self.headers.get("Content-Type"),
                                       "body": json.loads(body)})
                data = receiver.answer.encode()
                self.send_response(receiver.status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T0KEN-in-the-path"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def report() -> Report:
    return Report(run_id="r-1", resolved=False, pipeline=0, title="NCCL timeout on gpu-a17",
                  incident=f"all-reduce timed out on gpu-a17 (10.0.0.7); WANDB key {SECRET}", hosts=["gpu-a17"],
                  explanation="Investigation stopped: check limit reached.",
                  stopped={"limit": "max_checks", "message": "check limit reached: 2 of at most 2 check runs"})


def test_the_webhook_gets_the_filled_template_built_from_the_redacted_ticket(receiver: Receiver,
                                                                             tmp_path: Path) -> None:
    template = tmp_path / "jira.json"
    template.write_text(json.dumps({"fields": {"project": {"key": "GPU"}, "summary": "[aidai] {{summary}}",
                                               "description": "{{markdown}}", "labels": ["aidai", "{{status}}"]},
                                    "aidai": {"run": "{{run_id}}", "hosts": "{{hosts}}", "stopped": "{{stopped}}"}}))
    data = ticket_data(report())
    assert post(receiver.url, render_body(load_template(template), data)) == 201

    (sent,) = receiver.posts
    body = sent["body"]
    assert sent["type"] == "application/json" and sent["path"] == "/hooks/T0KEN-in-the-path"
    assert body["fields"]["summary"] == "[aidai] NCCL timeout on <host-1>"
    assert body["fields"]["labels"] == ["aidai", "escalated"] and body["aidai"]["hosts"] == ["<host-1>"]
    assert body["aidai"]["stopped"]["limit"] == "max_checks"  # a whole-string field keeps its JSON type
    assert body["fields"]["description"].startswith("# Escalation: NCCL timeout on <host-1>")
    assert all(value not in json.dumps(body) for value in (SECRET, "gpu-a17", "10.0.0.7"))

    assert post(receiver.url, render_body(None, data)) == 201  # no template: the ticket JSON itself
    assert receiver.posts[1]["body"] == data


def test_a_receiver_that_refuses_or_never_answers_is_a_clear_error(tmp_path: Path) -> None:
    with Receiver(status=500, answer="database is down") as failing:
        with pytest.raises(ExportError, match=r"answered HTTP 500: database is down") as refused:
            post(failing.url, {"a": 1})
        assert "T0KEN" not in str(refused.value)  # webhook URLs carry secrets: only scheme://host is shown

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts the connection, never answers
    try:
        with pytest.raises(ExportError, match=r"did not answer within 0.3 s"):
            post(f"http://127.0.0.1:{silent.getsockname()[1]}/hook", {"a": 1}, timeout_s=0.3)
    finally:
        silent.close()


@pytest.mark.parametrize(("content", "error"), [
    ('{"summary": "{{headline}}"}', r"unknown field\(s\) headline"),
    ('{"summary": ', "not JSON"),
])
def test_bad_templates_and_urls_are_refused_before_anything_is_sent(tmp_path: Path, content: str, error: str) -> None:
    template = tmp_path / "t.json"
    template.write_text(content)
    with pytest.raises(ExportError, match=error):
        load_template(template)
    with pytest.raises(ExportError, match="no such file"):
        load_template(tmp_path / "missing.json")
    with pytest.raises(ExportError, match="not an http"):
        check_url("file:///etc/passwd")


def test_ticket_files_are_written_whole_in_the_formats_asked(tmp_path: Path) -> None:
    data = ticket_data(report())
    (only_json,) = write_formats(data, tmp_path / "t", ["json"])
    assert json.loads(only_json.read_text())["run_id"] == "r-1" and not (tmp_path / "t.md").exists()
    assert [p.name for p in write_formats(data, tmp_path / "t.md", ["md", "json"])] == ["t.md", "t.json"]
    assert "Investigation stopped" in (tmp_path / "t.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.md"]  # no temporary file left


def test_the_cli_exports_a_limited_run_and_refuses_bad_export_options_before_running(
        receiver: Receiver, tmp_path: Path) -> None:
    from agent.cli.main import app
    from agent.sim.scenario import create_scenario

    host = f"sim:{create_scenario(tmp_path / 'host', [{'fault': 'gpu.ecc_uncorrectable', 'gpu': 1}], []).root}"
    data = tmp_path / "data"
    text = f"uncorrectable ECC error on rank 1; ssh alice@gpu-a17, key {SECRET}"
    base = ["diagnose", text, "--host", host, "--data-dir", str(data), "--no-history", "--max-checks", "2"]
    runner = CliRunner()

    bad = runner.invoke(app, [*base, "--webhook", receiver.url, "--webhook-template", str(tmp_path / "none.json")])
    assert bad.exit_code == 2 and "no such file" in bad.output and not (data / "runs").exists()

    template = tmp_path / "slack.json"
    template.write_text('{"text": "aidai {{status}}: {{summary}} ({{run_id}})"}')
    done = runner.invoke(app, [*base, "--ticket", str(tmp_path / "out" / "ticket"), "--ticket-format", "json",
                               "--webhook", receiver.url, "--webhook-template", str(template)])
    assert done.exit_code == 1, done.output  # unresolved: the check limit stopped it
    assert "check limit reached" in done.output and "ticket posted" in done.output
    ticket = json.loads((tmp_path / "out" / "ticket.json").read_text())
    assert ticket["stopped"]["limit"] == "max_checks" and not (tmp_path / "out" / "ticket.md").exists()
    assert SECRET not in json.dumps(ticket) and SECRET not in json.dumps(receiver.posts)
    assert receiver.posts[0]["body"]["text"].startswith("aidai escalated: ")

    runs = data / "runs"
    (mapping,) = runs.glob("*.redaction.json")
    assert stat.S_IMODE(mapping.stat().st_mode) == 0o600 and SECRET in mapping.read_text()
    (log,) = runs.glob("*.audit.jsonl")
    exports = [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "export"]
    assert [e["result"] for e in exports] == ["written", 201] and "T0KEN" not in json.dumps(exports)

    receiver.status = 503
    failed = runner.invoke(app, ["diagnose", "--resume", ticket["run_id"], "--data-dir", str(data), "--webhook",
                                 receiver.url])
    assert failed.exit_code == 2 and "answered HTTP 503" in failed.output
    assert (runs / f"{ticket['run_id']}.ticket.json").is_file()  # nothing lost: the ticket stays on disk
