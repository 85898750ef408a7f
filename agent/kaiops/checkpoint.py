"""Saving and loading a trained KAIOPS model: weights, config, the featurizer's statistics and host ids, the line
encoder it was trained with, and how it was produced. Loading is weights-only (no pickled code)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from agent.kaiops import CLASSES, KaiopsError
from agent.kaiops.features import Featurizer
from agent.kaiops.model import Kaiops, ModelConfig

FORMAT = "aidai-kaiops-checkpoint"
VERSION = 2  # 2: three channel blocks per metric (value, change from the job baseline, presence)
SHIPPED = Path(__file__).parent / "data" / "kaiops.pt"


@dataclass
class Trained:
    model: Kaiops
    featurizer: Featurizer
    encoder: str
    info: dict


def save(trained: Trained, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": FORMAT, "version": VERSION, "classes": list(CLASSES), "config": trained.model.cfg.dict(),
                "state": trained.model.state_dict(), "featurizer": trained.featurizer.state(),
                "encoder": trained.encoder, "info": trained.info}, path)


def load(path: Path | None = None) -> Trained:
    path = path or SHIPPED
    if not path.is_file():
        raise KaiopsError(f"KAIOPS checkpoint {path} not found" + (
            " (the shipped model is missing: reinstall aidai, or train one with `aidai kaiops train`)"
            if path == SHIPPED else ""))
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise KaiopsError(f"KAIOPS checkpoint {path} is corrupt or not a checkpoint "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0][:160]})") from exc
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise KaiopsError(f"{path} is not a KAIOPS checkpoint (no {FORMAT!r} marker)")
    if blob.get("version") != VERSION or blob.get("classes") != list(CLASSES):
        raise KaiopsError(f"{path}: checkpoint version {blob.get('version')} / classes {blob.get('classes')} do "
                          f"not match this aidai (version {VERSION}, classes {list(CLASSES)}): retrain it")
    try:
        model = Kaiops(ModelConfig(**blob["config"]))
        model.load_state_dict(blob["state"])
        f = blob["featurizer"]
        featurizer = Featurizer(list(f["mean"]), list(f["std"]), dict(f["host_ids"]))
    except (KeyError, TypeError, RuntimeError, ValueError) as exc:
        raise KaiopsError(f"KAIOPS checkpoint {path} is incomplete or inconsistent ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:160]})") from exc
    model.eval()
    return Trained(model, featurizer, str(blob["encoder"]), dict(blob.get("info", {})))
