"""Training (CPU, minutes) and batched prediction for the KAIOPS network, with fixed seeds."""

from __future__ import annotations

import copy
import random
import time

import numpy as np
import torch

from agent.kaiops import CLASSES, EPOCHS
from agent.kaiops.checkpoint import Trained
from agent.kaiops.dataset import Task
from agent.kaiops.encode import LineEncoder
from agent.kaiops.features import Arrays, Featurizer
from agent.kaiops.loss import DynamicClassWeightedLoss, per_class_accuracy
from agent.kaiops.model import Kaiops, ModelConfig
from agent.kaiops.scoring import score

HOST_DROPOUT = 0.5


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def labels_of(tasks: list[Task]) -> np.ndarray:
    missing = [t.id for t in tasks if t.label is None]
    if missing:
        raise ValueError(f"{len(missing)} task(s) have no label (first: {missing[0]})")
    return np.array([CLASSES.index(t.label) for t in tasks], dtype=np.int64)  # type: ignore[arg-type]


def tensors(a: Arrays, table: torch.Tensor) -> tuple[torch.Tensor, ...]:
    width = max(1, int((a.lines >= 0).sum(axis=1).max(initial=0)))  # lines are left-aligned: trim the padding
    return (torch.from_numpy(a.metrics), torch.from_numpy(np.ascontiguousarray(a.lines[:, :width])),
            torch.from_numpy(np.ascontiguousarray(a.steps[:, :width])), torch.from_numpy(a.hosts), table)


def _split(y: np.ndarray, frac: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    val = np.concatenate([rng.permutation(np.flatnonzero(y == c))[:max(1, int(frac * np.sum(y == c)))]
                          for c in np.unique(y)])
    train = np.setdiff1d(np.arange(len(y)), val)
    return train, val


def predict_proba(model: Kaiops, a: Arrays, table: torch.Tensor, batch: int = 512) -> np.ndarray:
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(a), batch):
            part = a.take(np.arange(i, min(len(a), i + batch)))
            out.append(torch.softmax(model(*tensors(part, table)), dim=1).numpy())
    return np.concatenate(out) if out else np.zeros((0, len(CLASSES)))


def train(tasks: list[Task], encoder: LineEncoder, *, epochs: int = EPOCHS, seed: int = 0, batch: int = 64,
          lr: float = 2e-3, use_logs: bool = True, use_metrics: bool = True, use_hosts: bool = True,
          dynamic_weights: bool = True, host_dropout: float = HOST_DROPOUT, log: bool = False,
          threads: int = 1, temporal_context: bool = True, val_frac: float = 0.1) -> tuple[Trained, dict]:
    """Train on `tasks` (10 % held out, stratified, for the per-class accuracy that drives the loss weights and
    for keeping the best epoch by macro-F1). Returns the model and its history. One torch thread by default: on
    this shared 2-core machine two threads ran several times slower than one."""
    seed_everything(seed)
    torch.set_num_threads(threads)
    started = time.perf_counter()
    y = labels_of(tasks)
    rng = np.random.default_rng(seed)
    tr, va = _split(y, val_frac, rng)
    featurizer = Featurizer.fit([tasks[i] for i in tr])
    arrays = featurizer.arrays(tasks, encoder)
    table = torch.from_numpy(encoder.table())
    cfg = ModelConfig(n_hosts=len(featurizer.host_ids) + 2, use_logs=use_logs, use_metrics=use_metrics,
                      use_hosts=use_hosts, host_dropout=host_dropout if use_hosts else 0.0,
                      temporal_context=temporal_context)
    model = Kaiops(cfg)
    loss_fn = DynamicClassWeightedLoss(len(CLASSES))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=epochs * -(-len(tr) // batch))
    train_a, val_a = arrays.take(tr), arrays.take(va)
    y_tr, y_va = torch.from_numpy(y[tr]), y[va]
    best, best_f1, history = copy.deepcopy(model.state_dict()), -1.0, []
    for epoch in range(epochs):
        model.train()
        order = rng.permutation(len(tr))
        total = 0.0
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            logits = model(*tensors(train_a.take(idx), table))
            loss = loss_fn(logits, y_tr[idx])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            sched.step()
            total += float(loss.detach()) * len(idx)
        pred = predict_proba(model, val_a, table).argmax(1)
        acc = per_class_accuracy(y_va, pred, len(CLASSES))
        weights = loss_fn.update(acc) if dynamic_weights else np.ones(len(CLASSES))
        s = score(y_va, pred)
        history.append({"epoch": epoch + 1, "loss": round(total / len(tr), 4), "val_macro_f1": s["macro_f1"],
                        "val_accuracy": [round(float(x), 3) for x in acc],
                        "weights": [round(float(x), 3) for x in weights]})
        if log:
            print(f"epoch {epoch + 1}: loss {total / len(tr):.4f} val macro-F1 {s['macro_f1']:.4f} "
                  f"weights {np.round(weights, 2).tolist()}", flush=True)
        if s["macro_f1"] > best_f1:
            best_f1, best = s["macro_f1"], copy.deepcopy(model.state_dict())
    model.load_state_dict(best)
    model.eval()
    info = {"train_tasks": len(tasks), "epochs": epochs, "seed": seed, "best_val_macro_f1": best_f1,
            "train_s": round(time.perf_counter() - started, 1)}
    return Trained(model, featurizer, encoder.kind, info), {"history": history, **info}
