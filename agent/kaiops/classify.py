"""Classifying one job (the CLI's `classify` and the agent tool): read its metrics CSV, log tail and hosts, run the
checkpoint, and (optionally) ask the knowledge graph for the root cause in the predicted category."""

from __future__ import annotations

import gzip
from collections import deque
from functools import cache
from pathlib import Path

import torch

from agent.kaiops import CLASSES, KaiopsError, checkpoint
from agent.kaiops.dataset import Task, read_metrics_csv
from agent.kaiops.encode import LineEncoder
from agent.kaiops.features import MAX_LINES

LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".gz")


def _lines(path: Path, keep: int) -> list[str]:
    """The last `keep` non-blank lines, streamed (job logs can be gigabytes)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:  # type: ignore[operator]
        return list(deque((line.rstrip("\n") for line in fh if line.strip()), maxlen=keep))


def read_log_tail(path: Path, limit: int = MAX_LINES) -> list[str]:
    """The last lines of a log file, or of each log file in a directory (files in name order; each file gets an
    equal share of `limit`, since ranks' files are not merged by time here)."""
    if path.is_file():
        return _lines(path, limit)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(LOG_SUFFIXES))
        if not files:
            raise KaiopsError(f"{path}: no log files (*.log, *.txt, *.out, *.err, *.gz)")
        share = max(2, limit // len(files))
        return [line for f in files for line in _lines(f, share)][-limit:]
    raise KaiopsError(f"{path}: no such file or directory")


@cache
def _model(path: Path | None) -> tuple[checkpoint.Trained, LineEncoder]:
    trained = checkpoint.load(path)
    return trained, LineEncoder(trained.encoder)


def probabilities(task: Task, path: Path | None = None) -> dict[str, float]:
    trained, lines = _model(path)
    from agent.kaiops.train import tensors

    arrays = trained.featurizer.arrays([task], lines)
    with torch.no_grad():
        p = torch.softmax(trained.model(*tensors(arrays, torch.from_numpy(lines.table()))), dim=1)[0]
    return {name: round(float(v), 4) for name, v in zip(CLASSES, p, strict=True)}


def classify_job(metrics: Path | None, logs: Path | None, hosts: list[str], path: Path | None = None,
                 rca: bool = True, extra_lines: list[str] | None = None) -> dict:
    task = Task(id="job", hosts=hosts, metrics=read_metrics_csv(metrics) if metrics else {},
                logs=(read_log_tail(logs) if logs else []) + list(extra_lines or []))
    probs = probabilities(task, path)
    label = max(probs, key=lambda k: probs[k])
    out: dict = {"label": label, "probabilities": probs, "lines_used": len(task.logs[-MAX_LINES:]),
                 "metrics_used": sorted(task.metrics)}
    if rca and label != "Normal":
        from agent.kaiops.kg import default_graph

        out["rca"] = default_graph().root_cause(label, task.logs[-MAX_LINES:])
    return out
