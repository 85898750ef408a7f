"""Load test of `aidai serve`: N concurrent diagnoses on simulated hosts through the HTTP API, each followed by
its own server-sent-event stream. Reports runs finished / lost, event latency (the graph's emit → the client
read it, same clock) and wall time; writes eval/results/server.md.

    python -m eval.bench_server --runs 20 --workers 4 --out eval/results/server.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from agent.paths import KNOWLEDGE_DIR
from agent.server.client import Client
from agent.sim.scenario import find_record, scenario_from_record

EXAMPLES = KNOWLEDGE_DIR / "examples" / "demo_incidents.jsonl"
RECORDS = ("demo-ecc", "demo-nvlink-refused")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def start_server(data: Path, port: int, targets: list[str], workers: int, log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "agent.server", "--port", str(port), "--data-dir", str(data),
               "--workers", str(workers), *[a for t in targets for a in ("--target", t)]]
    proc = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            env={**os.environ, "COLUMNS": "200"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited:\n{log.read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/hosts", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError("server did not start in 120 s")


def one_run(url: str, record: dict[str, Any], spec: str, out: dict[str, Any]) -> None:
    began = time.time()
    try:
        with Client(url, timeout=60) as client:
            run_id = client.start(record["description"], [spec], environment=record["environment"],
                                  approval="none", feedback_rounds=0)
            events = client.wait(run_id, timeout=900)
            run = client.run(run_id)
        latencies = [e.received - float(e.data["ts"]) for e in events if "ts" in e.data]
        labels = [c["label"] for c in (run.get("result") or {}).get("root_causes", [])]
        out.update(id=run_id, status=run["status"], events=len(events), latencies=latencies,
                   correct=bool(labels) and labels[0] == record["label"], wall=time.time() - began)
    except Exception as exc:  # a lost run is a result of the benchmark, not its crash
        out.update(status=f"client error: {type(exc).__name__}: {exc}", latencies=[], events=0, correct=False,
                   wall=time.time() - began)


def poll(url: str, stop: threading.Event, out: list[float]) -> None:
    """GET /api/runs every 0.25 s while the runs go: does the event loop stay responsive under load?"""
    with httpx.Client(base_url=url, timeout=30) as http:
        while not stop.is_set():
            began = time.perf_counter()
            http.get("/api/runs", params={"limit": 20}).raise_for_status()
            out.append(time.perf_counter() - began)
            stop.wait(0.25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4, help="aidai serve --workers")
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument("--out", type=Path, default=Path("eval/results/server.md"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="aidai-bench-server-") as tmp:
        root = Path(tmp)
        from agent.knowledge.incident_db import IncidentDB

        IncidentDB(data_dir=root / "data").ensure_seed()  # before the clock starts, as on a set-up server
        records = {rid: find_record(EXAMPLES, rid) for rid in RECORDS}
        specs = {rid: f"sim:{scenario_from_record(root / rid, EXAMPLES, rid).root}" for rid in RECORDS}
        proc = start_server(root / "data", args.port, list(specs.values()), args.workers, root / "server.log")
        try:
            url = f"http://127.0.0.1:{args.port}"
            warm: dict[str, Any] = {}  # one run first: loads the embedding model, as a server that served before
            one_run(url, records[RECORDS[0]], specs[RECORDS[0]], warm)
            results: list[dict[str, Any]] = [{} for _ in range(args.runs)]
            threads = [threading.Thread(target=one_run, args=(url, records[RECORDS[i % len(RECORDS)]],
                                                              specs[RECORDS[i % len(RECORDS)]], results[i]))
                       for i in range(args.runs)]
            api: list[float] = []
            stop = threading.Event()
            poller = threading.Thread(target=poll, args=(url, stop, api))
            began = time.time()
            poller.start()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wall = time.time() - began
            stop.set()
            poller.join()
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    done = [r for r in results if r.get("status") == "done"]
    latencies = [x for r in results for x in r["latencies"]]
    row = {"runs": args.runs, "workers": args.workers, "done": len(done), "lost": args.runs - len(done),
           "correct": sum(r["correct"] for r in results), "events": len(latencies),
           "p50_ms": 1000 * percentile(latencies, 0.5), "p95_ms": 1000 * percentile(latencies, 0.95),
           "max_ms": 1000 * max(latencies, default=float("nan")), "wall_s": wall,
           "run_p50_s": statistics.median(r["wall"] for r in results), "cpus": os.cpu_count(),
           "api_p95_ms": 1000 * percentile(api, 0.95), "api_n": len(api)}
    table = ["| runs | server workers | done | lost | root cause right | events streamed | event latency p50 | "
             "p95 | max | GET /api/runs p95 | wall (all runs) | per-run wall p50 | CPUs |", "|" + "---|" * 13,
             f"| {row['runs']} | {row['workers']} | {row['done']} | {row['lost']} | {row['correct']} | "
             f"{row['events']} | {row['p50_ms']:.0f} ms | {row['p95_ms']:.0f} ms | {row['max_ms']:.0f} ms | "
             f"{row['api_p95_ms']:.0f} ms ({row['api_n']} calls) | "
             f"{row['wall_s']:.0f} s | {row['run_p50_s']:.0f} s | {row['cpus']} |"]
    failures = [f"- {r.get('id', '?')}: {r['status']}" for r in results if r.get("status") != "done"]
    text = "\n".join(["# aidai serve under load", "",
                      f"`python -m eval.bench_server --runs {args.runs} --workers {args.workers}`: {args.runs} "
                      f"concurrent diagnoses ({', '.join(RECORDS)} alternating, simulated hosts, offline reasoner, "
                      "active checks not run) through POST /api/runs, each client following its own SSE stream. "
                      "Event latency: the graph's emit (stored, then pushed) to the client reading it. "
                      "GET /api/runs p95: a client polling the list every 0.25 s during the load (is the event "
                      "loop free?). One warm-up run before the clock (it loads the embedding model).", "",
                      *table, "", *(failures or ["No run lost."]), ""])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
