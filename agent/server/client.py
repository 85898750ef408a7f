"""A small client of the aidai API (httpx): what the load benchmark and the tests drive the server with."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Event:
    seq: int
    type: str
    data: dict[str, Any]
    received: float  # time.time() when the client read it


class Client:
    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30.0):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, incident: str, hosts: list[str], **fields: Any) -> str:
        response = self.http.post("/api/runs", json={"incident": incident, "hosts": hosts, **fields})
        response.raise_for_status()
        return str(response.json()["id"])

    def run(self, run_id: str) -> dict[str, Any]:
        response = self.http.get(f"/api/runs/{run_id}")
        response.raise_for_status()
        return response.json()

    def events(self, run_id: str, after: int = 0, until: tuple[str, ...] = (),
               timeout: float = 300.0) -> Iterator[Event]:
        """The run's events until the stream ends (run done or failed) or an event of a type in `until`."""
        deadline = time.monotonic() + timeout
        with self.http.stream("GET", f"/api/runs/{run_id}/events", params={"after": after},
                              timeout=httpx.Timeout(timeout, connect=10.0)) as response:
            response.raise_for_status()
            for event in parse_sse(response.iter_lines()):
                yield event
                if event.type == "end" or event.type in until:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"run {run_id}: no end of stream within {timeout:.0f} s")

    def wait(self, run_id: str, until: tuple[str, ...] = (), timeout: float = 300.0) -> list[Event]:
        return list(self.events(run_id, until=until, timeout=timeout))


def parse_sse(lines: Iterator[str]) -> Iterator[Event]:
    """text/event-stream lines into events (comments and pings skipped)."""
    kind, seq = "message", 0
    data: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r")
        if not line:
            if data:
                text = "\n".join(data)
                yield Event(seq=seq, type=kind, data=json.loads(text) if text.startswith("{") else {"text": text},
                            received=time.time())
            kind, data = "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            kind = value
        elif name == "data":
            data.append(value)
        elif name == "id" and value.isdigit():
            seq = int(value)
