"""What redaction and the audit log cost: redacting a 1 MB realistic training log, restoring it, redacting one
LLM prompt, and one audit-log append (O_APPEND write + fsync). Writes eval/results/safety.md.

    .venv/bin/python -m eval.bench_safety [--out eval/results/safety.md]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from agent.audit import AuditLog
from agent.audit_records import CheckRecord
from agent.redact import Redactor

ROOT = Path(__file__).resolve().parents[1]
LOG = (ROOT / "tests" / "fixtures" / "redact" / "realistic.log").read_text()
PROMPT_REPEATS = 8  # a prompt of ~5.5k characters: the size the reasoner's budgets allow
APPENDS = 500


def measure() -> list[list[str]]:
    text = LOG * (1_000_000 // len(LOG))
    redactor = Redactor(hostnames=["trainer7"], usernames=["alice"])
    began = time.perf_counter()
    out = redactor.text(text)
    redact_s = time.perf_counter() - began
    began = time.perf_counter()
    exact = redactor.restore(out) == text
    restore_s = time.perf_counter() - began
    prompt = LOG * PROMPT_REPEATS
    began = time.perf_counter()
    for _ in range(200):
        Redactor(hostnames=["trainer7"]).text(prompt)
    prompt_ms = (time.perf_counter() - began) / 200 * 1000
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:  # a real disk, not tmpfs: fsync must cost
        log = AuditLog(Path(tmp) / "run.audit.jsonl", "run")
        began = time.perf_counter()
        for i in range(APPENDS):
            log.append(CheckRecord(node="GPU", check="xid_scan", host="node-1", tier="passive", verdict="PASS",
                                   exit_code=0, output_sha256="0" * 64, duration_s=0.1, commands=[], summary=f"{i}"))
        append_ms = (time.perf_counter() - began) / APPENDS * 1000
    mb = len(text) / 1e6
    return [[f"redact a {mb:.2f} MB realistic log", f"{redact_s:.2f} s ({mb / redact_s:.2f} MB/s), "
             f"{len(redactor.originals)} distinct values"],
            ["restore the same log", f"{restore_s:.3f} s, byte-exact: {'yes' if exact else 'NO'}"],
            [f"redact one {len(prompt)}-character LLM prompt", f"{prompt_ms:.1f} ms"],
            [f"audit log append + fsync ({APPENDS} events)", f"{append_ms:.1f} ms per event"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "eval" / "results" / "safety.md")
    args = parser.parse_args()
    rows = measure()
    lines = ["# Redaction and audit log cost", "", "`.venv/bin/python -m eval.bench_safety`", "",
             "| what | measured |", "|---|---|", *[f"| {a} | {b} |" for a, b in rows]]
    print("\n".join(lines))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
