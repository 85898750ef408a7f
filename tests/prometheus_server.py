"""A real Prometheus (Debian's prometheus package) on 127.0.0.1 with a throwaway TSDB, scraping given targets every
second. The Debian package's own service is never used (no systemd here): this starts the binary with its own
config file, storage path and listen address, polls /-/ready, then the query API until every target has samples."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.chroma_server import free_port
from tests.processes import stop

READY_WITHIN_S = 90.0  # generous: a loaded 2-core machine; polling ends as soon as it is ready


def prometheus_exe() -> str:
    found = shutil.which("prometheus")
    if found is None:
        pytest.fail("prometheus is not installed (Debian package prometheus; `make test` installs it)")
    return found


def scrape_config(jobs: list[dict[str, Any]]) -> str:
    """prometheus.yml with 1 s scrapes (JSON is YAML)."""
    return json.dumps({"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                       "scrape_configs": jobs}, indent=1)


def query(url: str, promql: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}",
                                timeout=10) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def wait_until(what: str, condition: Any, log: Path, within_s: float = READY_WITHIN_S) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except OSError:
            pass
        time.sleep(0.2)
    pytest.fail(f"Prometheus: {what} not within {within_s:.0f} s; log tail:\n{log.read_text()[-3000:]}")


@contextmanager
def running_prometheus(root: Path, jobs: list[dict[str, Any]]) -> Iterator[str]:
    """Start Prometheus on a free loopback port with these scrape jobs; yield its URL once /-/ready answers."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "prometheus.yml"
    config.write_text(scrape_config(jobs))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = root / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([prometheus_exe(), f"--config.file={config}", f"--storage.tsdb.path={root / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle",
                                 "--storage.tsdb.retention.time=1d"],
                                stdout=out, stderr=subprocess.STDOUT, cwd=root)
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"Prometheus exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)

        wait_until("/-/ready", ready, log)
        yield url
    finally:
        stop(proc, grace_s=30)


def wait_for_samples(url: str, promql: str, count: int, log: Path) -> None:
    """Poll the query API until `promql` returns at least `count` series."""
    wait_until(f"{count} series of {promql}", lambda: len(query(url, promql)) >= count, log)
