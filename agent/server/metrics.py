"""`aidai serve`'s own metrics for Prometheus (GET /metrics, prometheus-client's text exposition).

Counters and histograms are fed by the run manager as runs move (started, finished, each check result stored, each
worker turn); the run counts by status and the questions waiting for an answer are read from the run store at
each scrape, so they are right after a restart too. One registry per app, never prometheus-client's global one:
two servers in one process (the tests) keep their own numbers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from agent.server.store import RunStore

STATUSES = ("queued", "running", "waiting", "done", "failed")
WAITING_FOR = ("approval", "feedback")
CHECK_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
RUN_BUCKETS = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 14400.0, 86400.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class StoreCollector(Collector):
    """Runs by status and runs waiting for an answer, counted in the store when Prometheus scrapes."""

    def __init__(self, store: RunStore):
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        statuses, waiting = self.store.counts()
        runs = GaugeMetricFamily("aidai_runs", "Runs in the store by status.", labels=["status"])
        for status in STATUSES:
            runs.add_metric([status], statuses.get(status, 0))
        yield runs
        asked = GaugeMetricFamily("aidai_runs_waiting", "Runs stopped until someone answers, by what they wait for "
                                  "(approval: active checks to approve; feedback: an exploration question).",
                                  labels=["waiting_for"])
        for kind in WAITING_FOR:
            asked.add_metric([kind], waiting.get(kind, 0))
        yield asked


class ServerMetrics:
    def __init__(self, store: RunStore, workers: int):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.started = Counter("aidai_runs_started", "Runs accepted (POST /api/runs).", registry=r)
        self.finished = Counter("aidai_runs_finished", "Runs that ended: status done (resolved true or false) or "
                                "failed.", ["status", "resolved"], registry=r)
        self.verdicts = Counter("aidai_check_verdicts", "Check results by host, check and verdict (results reused "
                                "from the run's cache are not counted again).", ["host", "check", "verdict"],
                                registry=r)
        self.check_seconds = Histogram("aidai_check_duration_seconds", "How long each check ran on a host.",
                                       ["check"], buckets=CHECK_BUCKETS, registry=r)
        self.run_seconds = Histogram("aidai_run_duration_seconds", "From the request to done or failed, time "
                                     "spent waiting for approvals and answers included.", buckets=RUN_BUCKETS,
                                     registry=r)
        self.queued = Gauge("aidai_worker_queue", "Runs handed to the workers and not started yet.", registry=r)
        self.busy = Gauge("aidai_workers_busy", "Workers diagnosing now.", registry=r)
        Gauge("aidai_workers", "Worker threads (aidai serve --workers).", registry=r).set(workers)
        r.register(StoreCollector(store))

    def event(self, event: dict[str, Any]) -> None:
        """A stored run event: a fresh check result counts its verdict and duration."""
        if event.get("type") != "result" or event.get("cached"):
            return
        check, host = str(event.get("check", "")), str(event.get("host", ""))
        self.verdicts.labels(host=host, check=check, verdict=str(event.get("verdict", ""))).inc()
        duration = event.get("duration_s")
        if isinstance(duration, int | float) and duration >= 0:
            self.check_seconds.labels(check=check).observe(float(duration))

    def ended(self, status: str, resolved: bool | None, seconds: float) -> None:
        self.finished.labels(status=status, resolved="" if resolved is None else str(resolved).lower()).inc()
        self.run_seconds.observe(max(seconds, 0.0))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
