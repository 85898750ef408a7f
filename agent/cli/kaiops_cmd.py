"""`aidai kaiops generate|train|eval|classify`: the KAIOPS training-task anomaly classifier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from agent.kaiops import EPOCHS

app = typer.Typer(help="Classify training-task anomalies from logs, minute metrics and hosts (KAIOPS).",
                  no_args_is_help=True)
console = Console(emoji=False)
err = Console(stderr=True, emoji=False)


def _fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(2)


@app.command("generate")
def generate_cmd(
    out: Annotated[Path, typer.Option("--out", help="JSONL file to write.")],
    seed: Annotated[int, typer.Option(help="Seed of the task draw (the cluster is the same for every seed).")] = 0,
    tasks: Annotated[int, typer.Option(help="Number of tasks.")] = 10_000,
) -> None:
    """Simulate labelled training tasks (KAIOPS class mix) in the JSONL task format."""
    if tasks < 1:
        _fail("--tasks must be at least 1")
    if not out.parent.exists():
        _fail(f"{out.parent}: no such directory")
    from collections import Counter

    from agent.kaiops.dataset import write_tasks
    from agent.kaiops.generate import generate

    rows = generate(seed, tasks)
    write_tasks(rows, out)
    mix = Counter(r["label"] for r in rows)
    console.print(f"wrote {len(rows)} tasks to {out}: " + ", ".join(f"{k} {v}" for k, v in mix.most_common()))


def _tasks(data: Path | None, seed: int | None, n: int | None, what: str) -> list:
    from agent.kaiops import KaiopsError
    from agent.kaiops.dataset import as_tasks, read_tasks
    from agent.kaiops.generate import generate

    if data is not None and (seed is not None or n is not None):
        _fail(f"{what}: give either --data FILE or --seed N --tasks N, not both")
    if data is not None:
        try:
            return read_tasks(data)
        except KaiopsError as exc:
            _fail(str(exc))
    if seed is None or n is None or n < 1:
        _fail(f"{what}: give --data FILE, or --seed N and --tasks N (N >= 1)")
    return as_tasks(generate(seed, n))  # type: ignore[arg-type]


@app.command("train")
def train_cmd(
    out: Annotated[Path, typer.Option("--out", help="Checkpoint file to write (.pt).")],
    data: Annotated[Path | None, typer.Option("--data", help="Training tasks (JSONL).")] = None,
    seed: Annotated[int | None, typer.Option(help="Generate the training set with this seed...")] = None,
    tasks: Annotated[int | None, typer.Option(help="...and this many tasks.")] = None,
    epochs: Annotated[int, typer.Option(help="Training epochs.")] = EPOCHS,
    train_seed: Annotated[int, typer.Option("--train-seed", help="Seed of torch/numpy/random.")] = 0,
    encoder: Annotated[str, typer.Option(help="Line encoder: minilm (all-MiniLM-L6-v2) or hash (tests).")] = "minilm",
    no_logs: Annotated[bool, typer.Option("--no-logs", help="Ablation: without the log branch.")] = False,
    no_metrics: Annotated[bool, typer.Option("--no-metrics", help="Ablation: without the metric branch.")] = False,
    no_hosts: Annotated[bool, typer.Option("--no-hosts", help="Ablation: without the host branch.")] = False,
    static_weights: Annotated[bool, typer.Option("--static-weights", help="Plain smoothed CE, no dynamic weights."
                                                 )] = False,
) -> None:
    """Train KAIOPS on CPU and save a checkpoint."""
    from agent.kaiops.encode import ENCODERS

    if encoder not in ENCODERS:
        _fail(f"--encoder must be one of {', '.join(ENCODERS)}")
    if epochs < 1:
        _fail("--epochs must be at least 1")
    if no_logs and no_metrics and no_hosts:
        _fail("at least one modality must stay on")
    if not out.parent.exists():
        _fail(f"{out.parent}: no such directory")
    rows = _tasks(data, seed, tasks, "train")
    from agent.kaiops import checkpoint
    from agent.kaiops.encode import LineEncoder
    from agent.kaiops.train import train

    try:
        trained, history = train(rows, LineEncoder(encoder), epochs=epochs, seed=train_seed, use_logs=not no_logs,
                                 use_metrics=not no_metrics, use_hosts=not no_hosts,
                                 dynamic_weights=not static_weights, log=True)
    except ValueError as exc:
        _fail(str(exc))
    trained.info.update({"data": str(data) if data else None, "data_seed": seed, "data_tasks": len(rows)})
    checkpoint.save(trained, out)
    console.print(f"trained on {len(rows)} tasks in {history['train_s']} s (best validation macro-F1 "
                  f"{history['best_val_macro_f1']:.4f}); wrote {out}")


@app.command("eval")
def eval_cmd(
    data: Annotated[Path | None, typer.Option("--data", help="Held-out tasks (JSONL).")] = None,
    seed: Annotated[int | None, typer.Option(help="Generate the held-out set with this seed...")] = None,
    tasks: Annotated[int | None, typer.Option(help="...and this many tasks.")] = None,
    train_data: Annotated[Path | None, typer.Option("--train", help="Train KAIOPS and the baselines on this file "
                                                    "(default: the shipped checkpoint, and baselines on its "
                                                    "regenerated training set).")] = None,
    ckpt: Annotated[Path | None, typer.Option("--checkpoint", help="KAIOPS checkpoint (default: shipped).")] = None,
    ablations: Annotated[bool, typer.Option("--ablations", help="Also train and score w/o logs, metrics, hosts."
                                            )] = False,
    epochs: Annotated[int, typer.Option(help="Epochs for models trained here.")] = EPOCHS,
    encoder: Annotated[str, typer.Option(help="Line encoder for models trained here (minilm, or hash for tests).")
                       ] = "minilm",
    as_json: Annotated[bool, typer.Option("--json", help="Print the scores as JSON.")] = False,
) -> None:
    """Score KAIOPS, the Decision Tree and the Random Forest (and ablations) on a held-out set."""
    if train_data is not None and ckpt is not None:
        _fail("give --train FILE or --checkpoint FILE, not both")
    from agent.kaiops.encode import ENCODERS

    if encoder not in ENCODERS:
        _fail(f"--encoder must be one of {', '.join(ENCODERS)}")
    held_out = _tasks(data, seed, tasks, "eval")
    from agent.kaiops import KaiopsError
    from agent.kaiops.evaluate import evaluate

    try:
        result = evaluate(held_out, train_path=train_data, checkpoint_path=ckpt, ablations=ablations, epochs=epochs,
                          encoder=encoder, progress=None if as_json else err.print)
    except (KaiopsError, ValueError) as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(result, indent=1))
        return
    table = Table(title=f"{len(held_out)} held-out tasks")
    for col in ("method", "macro P", "macro R", "macro F1", "FNR", "FPR"):
        table.add_column(col)
    for name, s in result["methods"].items():
        table.add_row(name, *(f"{s[k]:.4f}" for k in ("macro_p", "macro_r", "macro_f1", "fnr", "fpr")))
    console.print(table)


@app.command("classify")
def classify_cmd(
    metrics: Annotated[Path | None, typer.Option("--metrics", help="Metrics CSV: one column per metric, a row a "
                                                 "minute, oldest first.")] = None,
    logs: Annotated[Path | None, typer.Option("--logs", help="The job's log file (its last lines are used).")] = None,
    hosts: Annotated[str, typer.Option("--hosts", help="Comma-separated host names.")] = "",
    ckpt: Annotated[Path | None, typer.Option("--checkpoint", help="KAIOPS checkpoint (default: shipped).")] = None,
    rca: Annotated[bool, typer.Option("--rca/--no-rca", help="Knowledge-graph root cause and solutions.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Classify one job: class probabilities, and the knowledge graph's root cause and solutions."""
    if metrics is None and logs is None:
        _fail("give --metrics CSV and/or --logs FILE")
    from agent.kaiops import KaiopsError
    from agent.kaiops.classify import classify_job

    try:
        out = classify_job(metrics, logs, [h.strip() for h in hosts.split(",") if h.strip()], ckpt, rca=rca)
    except (KaiopsError, OSError) as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(out, indent=1))
        return
    probs = out["probabilities"]
    console.print(f"[bold]{out['label']}[/] ({probs[out['label']]:.3f}); "
                  + ", ".join(f"{k} {v:.3f}" for k, v in probs.items() if k != out["label"]))
    if out.get("rca"):
        r = out["rca"]
        console.print(f"root cause: {r['root_cause']} (score {r['score']:.3f})")
        for s in r["solutions"]:
            console.print(f"  - {s}")
