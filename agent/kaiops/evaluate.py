"""Held-out evaluation: KAIOPS (shipped checkpoint, or trained on a given file), the Decision Tree and Random
Forest trained on the same training data, and optionally the modality ablations trained here."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from agent.kaiops import EPOCHS, KaiopsError, checkpoint
from agent.kaiops.baselines import BASELINES, fit_predict
from agent.kaiops.dataset import Task, as_tasks, read_tasks
from agent.kaiops.encode import LineEncoder
from agent.kaiops.generate import generate
from agent.kaiops.scoring import score
from agent.kaiops.train import labels_of, predict_proba, train

ABLATIONS = {"kaiops_wo_logs": {"use_logs": False}, "kaiops_wo_metrics": {"use_metrics": False},
             "kaiops_wo_hosts": {"use_hosts": False}}


def training_set(trained: checkpoint.Trained) -> list[Task]:
    """The tasks a checkpoint was trained on: regenerated from its seed, or read from its file."""
    info = trained.info
    if info.get("data_seed") is not None and info.get("data_tasks"):
        return as_tasks(generate(int(info["data_seed"]), int(info["data_tasks"])))
    if info.get("data") and Path(info["data"]).is_file():
        return read_tasks(Path(info["data"]))
    raise KaiopsError("the checkpoint does not say how to rebuild its training set: pass --train FILE")


def evaluate(held_out: list[Task], *, train_path: Path | None = None, checkpoint_path: Path | None = None,
             ablations: bool = False, epochs: int = EPOCHS, encoder: str = "minilm", seed: int = 0,
             progress: Callable[[str], object] | None = None) -> dict:
    say = progress or (lambda _msg: None)
    y = labels_of(held_out)
    timing: dict[str, float] = {}
    if train_path is not None:
        train_tasks = read_tasks(train_path)
        lines = LineEncoder(encoder)
        say(f"training KAIOPS on {len(train_tasks)} tasks from {train_path}")
        trained, history = train(train_tasks, lines, epochs=epochs, seed=seed)
        timing["kaiops_train_s"] = history["train_s"]
    else:
        trained = checkpoint.load(checkpoint_path)
        lines = LineEncoder(trained.encoder)
        say("rebuilding the checkpoint's training set for the baselines")
        train_tasks = training_set(trained)
    started = time.perf_counter()
    arrays = trained.featurizer.arrays(held_out, lines)
    timing["embed_and_featurize_s"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    proba = predict_proba(trained.model, arrays, torch.from_numpy(lines.table()))
    timing["kaiops_predict_s"] = round(time.perf_counter() - started, 2)
    methods = {"kaiops": score(y, proba.argmax(1))}
    say("training the decision tree and random forest")
    started = time.perf_counter()
    y_train = labels_of(train_tasks)
    for name, pred in fit_predict(BASELINES, train_tasks, y_train, held_out, seed).items():
        methods[name] = score(y, pred)
    timing["baselines_s"] = round(time.perf_counter() - started, 2)
    if ablations:
        for name, flags in ABLATIONS.items():
            say(f"training {name}")
            model, history = train(train_tasks, lines, epochs=epochs, seed=seed, **flags)
            timing[f"{name}_train_s"] = history["train_s"]
            arrays = model.featurizer.arrays(held_out, lines)
            methods[name] = score(y, predict_proba(model.model, arrays, torch.from_numpy(lines.table())).argmax(1))
    return {"methods": methods, "held_out_tasks": len(held_out), "train_tasks": len(train_tasks),
            "checkpoint": trained.info, "timing": timing}
