"""`aidai eval`: the diagnosis benchmark (AidAI §6) on incident records with simulated hosts. A thin face over
eval.harness: every record's faults become simulated hosts, each method diagnoses every record, the rows are
scored and written as Markdown tables and JSON.

Exit codes: 0 the benchmark ran (failed incidents are error rows in it), 2 bad input or setup.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from agent.cli.diagnose_cmd import clean_errors
from agent.cli.options import BaseUrlOpt, LlmOpt, ModelOpt

METHOD_HELP = "aidai | rcacopilot | tgd | did | cvd"


def _harness_importable() -> None:
    """eval/ lives next to agent/ in the checkout but is not installed: `aidai eval` runs from a checkout."""
    from agent.paths import ROOT

    try:
        import eval.harness  # noqa: F401
    except ImportError:
        if not (ROOT / "eval" / "harness" / "__init__.py").is_file():
            raise FileNotFoundError(f"the benchmark harness (eval/harness) is not in {ROOT}: run `aidai eval` "
                                    "from a source checkout") from None
        sys.path.append(str(ROOT))  # spawned workers inherit sys.path


def _command(**options: Any) -> str:
    """The command line this run is reproduced with (for the report)."""
    words = ["aidai", "eval"]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False or value == []:
            continue
        if value is True:
            words.append(flag)
        elif isinstance(value, list):
            words += [w for v in value for w in (flag, str(v))]
        else:
            words += [flag, str(value)]
    return " ".join(shlex.quote(w) for w in words)


def parse_seeds(values: list[str] | None) -> list[int]:
    """--confound 1 --confound 2 or --confound 1,2,3: the seeds in order, each once."""
    seeds: list[int] = []
    for value in values or []:
        for word in filter(None, (w.strip() for w in str(value).split(","))):
            try:
                seed = int(word)
            except ValueError:
                raise typer.BadParameter(f"{word!r} is not an integer seed", param_hint="--confound") from None
            if seed not in seeds:
                seeds.append(seed)
    return seeds


def run_tag(base: str | None, default: str, confound: int | None, controls: bool, several: bool) -> str:
    """A run's file name: --tag as given (with -SEED when several seeds run), else the history options' name
    with _confound-SEED and _controls."""
    if base:
        return f"{base}-{confound}" if several and confound is not None else base
    parts = [default] + ([f"confound-{confound}"] if confound is not None else []) + (["controls"] if controls
                                                                                       else [])
    return "_".join(parts)


def _tag(seed: bool, history: Path | None, leave_one_out: bool, remove: list[str], llm: str,
         taxonomy: Path | None = None) -> str:
    parts = ["seed" if seed else "no-seed"] if history else ["seed" if seed else "no-history"]
    if history:
        parts.append("history-" + history.stem)
    if taxonomy:
        parts.append("taxonomy-" + taxonomy.stem)
    if leave_one_out:
        parts.append("leave-one-out")
    if remove:
        parts.append("remove-" + "-".join(r.rsplit(".", 1)[-1].lower() for r in remove))
    if llm != "offline":
        parts.append(llm)
    return "_".join(parts)


def eval_command(
    incidents: Annotated[Path, typer.Option("--incidents", metavar="FILE", help="Incident records (JSONL: id, "
                                            "description, environment, label, faults, noise, hosts).")],
    history: Annotated[Path | None, typer.Option("--history", metavar="FILE",
                                                 help="Past incidents imported into a fresh DB for this run.")] = None,
    seed: Annotated[bool, typer.Option("--seed/--no-seed", help="The bundled seed incidents are part of the "
                                       "history (--no-seed without --history: empty history).")] = True,
    method: Annotated[list[str] | None, typer.Option("--method", metavar=METHOD_HELP,
                                                     help="Method to run (repeatable; default aidai).")] = None,
    llm: LlmOpt = "offline",
    base_url: BaseUrlOpt = None,
    model: ModelOpt = None,
    remove_label: Annotated[list[str] | None, typer.Option(
        "--remove-label", metavar="LABEL", help="Drop this taxonomy label (and its past incidents) to measure "
                                                "unseen incidents (repeatable).")] = None,
    leave_one_out: Annotated[bool, typer.Option("--leave-one-out", help="The other incidents of FILE are the "
                                                "history of each one.")] = False,
    workers: Annotated[int, typer.Option("--workers", min=0, help="Worker processes (0: in this process).")] = 2,
    timeout: Annotated[float, typer.Option("--timeout", metavar="S", help="Per-incident time limit.")] = 600.0,
    knowledge: Annotated[bool, typer.Option("--knowledge/--no-knowledge",
                                            help="Index the KB for pipeline 3's suggestions (aidai).")] = True,
    out: Annotated[Path | None, typer.Option("--out", metavar="DIR", help="Write TAG.md, TAG.metrics.json, "
                                             "TAG.rows.jsonl and DIR/metrics.json.")] = None,
    tag: Annotated[str | None, typer.Option("--tag", metavar="NAME", help="Name of this run's files (default "
                                            "from the history options).")] = None,
    cache_dir: Annotated[Path | None, typer.Option("--cache-dir", metavar="DIR", help="Where the seed DB and KB "
                                                   "index are built once (default: <data dir>/eval-cache).")] = None,
    only: Annotated[list[str] | None, typer.Option("--only", metavar="ID", help="Run these record ids only.")
                    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON on stdout: one method's object, "
                                          "or {\"methods\": {name: object}} for several.")] = False,
    taxonomy: Annotated[Path | None, typer.Option("--taxonomy", metavar="FILE", help="Diagnose with this taxonomy "
                                                  "(e.g. built by `aidai taxonomy build`) instead of the shipped one."
                                                  )] = None,
    confound: Annotated[list[str] | None, typer.Option(
        "--confound", metavar="SEED", help="A realistic fleet drawn per record from SEED (eval/CONFOUND.md): view, "
        "latent faults, node count; repeatable or comma-separated, one run per seed.")] = None,
    controls: Annotated[bool, typer.Option("--controls", help="The records without their cause's faults (latent "
                                           "and noise kept): the right outcome is no confirmed cause.")] = False,
    trace: Annotated[bool, typer.Option("--trace", help="Each row of aidai and tgd also carries what the conclusion "
                                        "was drawn from: every judged leaf with its evidence, the walk's order, the "
                                        "similar past incidents and how each confirmed leaf is tied to the incident."
                                        )] = False,
) -> None:
    """Benchmark diagnosis methods on incident records with simulated hosts: micro/macro F1 at three levels,
    per-category scores, pipeline shares, checks, LLM calls and time per incident."""
    err = Console(stderr=True, emoji=False)
    seeds: list[int | None] = [*parse_seeds(confound)] or [None]
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    with clean_errors(err):
        _harness_importable()
        for confound_seed in seeds:
            command = _command(incidents=incidents, history=history, no_seed=not seed, method=method, llm=None if
                               llm == "offline" else llm, base_url=base_url, model=model, remove_label=remove_label,
                               leave_one_out=leave_one_out, workers=workers, no_knowledge=not knowledge, out=out,
                               tag=tag, only=only, taxonomy=taxonomy, confound=confound_seed, controls=controls)
            name = run_tag(tag, _tag(seed, history, leave_one_out, remove_label or [], llm, taxonomy), confound_seed,
                           controls, len(seeds) > 1)
            runs[name] = _run(command, err, incidents, history, seed, method or ["aidai"], llm, base_url, model,
                              remove_label or [], leave_one_out, workers, timeout, knowledge, out, name, cache_dir,
                              only or [], taxonomy, confound_seed, controls, trace)
    if as_json:
        payloads: dict[str, Any] = {}
        for name, metrics in runs.items():
            names = list(metrics)
            payloads[name] = metrics[names[0]] if len(names) == 1 else {"methods": metrics}
        typer.echo(json.dumps(next(iter(payloads.values())) if len(payloads) == 1 else {"runs": payloads}, indent=1))
        return
    for run, metrics in runs.items():
        if len(runs) > 1:
            typer.echo(run)
        for name, m in metrics.items():
            typer.echo(f"{name:<11} leaf micro-F1 {m['leaf']['micro_f1']} macro-F1 {m['leaf']['macro_f1']} · "
                       f"MAIN micro-F1 {m['main']['micro_f1']} · errors {m['errors']}/{m['n']} · "
                       f"checks {m['checks_per_incident']} ({m['check_seconds_per_incident']} s) · "
                       f"LLM calls {m['llm_calls_per_incident']} per incident")


def _run(command: str, err: Console, incidents: Path, history: Path | None, seed: bool, methods: list[str], llm: str,
         base_url: str | None, model: str | None, remove: list[str], leave_one_out: bool, workers: int,
         timeout: float, knowledge: bool, out: Path | None, tag: str | None, cache_dir: Path | None,
         only: list[str], taxonomy_file: Path | None = None, confound: int | None = None,
         controls: bool = False, trace: bool = False) -> dict[str, dict[str, Any]]:
    from agent.reasoning.factory import make_reasoner
    from agent.reasoning.offline import OfflineReasoner
    from agent.taxonomy import TaxonomyError, load_candidate, load_taxonomy
    from eval.harness import report
    from eval.harness.confound import confound_records
    from eval.harness.methods import resolve_method
    from eval.harness.metrics import compute_metrics, unseen_metrics
    from eval.harness.problems import Problem, RecordsError, load_problems, remove_labels
    from eval.harness.runner import RunConfig, run_benchmark

    def bad(message: str) -> typer.Exit:
        err.print(f"[red]error: {escape(message)}[/]", highlight=False, soft_wrap=True)
        return typer.Exit(2)

    if history is not None and not history.is_file():
        raise bad(f"--history {history}: no such file")
    try:
        tax = load_candidate(taxonomy_file) if taxonomy_file else load_taxonomy()
    except TaxonomyError as exc:
        raise bad(f"--taxonomy {taxonomy_file}: {exc}") from None
    try:
        problems = load_problems(incidents)
        names = {spec: resolve_method(spec).name for spec in dict.fromkeys(methods)}
        if remove:
            remove_labels(tax, remove)
    except (RecordsError, KeyError, ImportError, AttributeError) as exc:
        raise bad(str(exc).strip("'\"")) from None
    if only:
        problems = [p for p in problems if p.id in set(only)]
        if not problems:
            raise bad(f"no record with id {', '.join(only)} in {incidents}")
    if confound is not None or controls:  # drawn here, in the parent: every worker and method sees one fleet
        problems = [Problem(r) for r in confound_records([p.record for p in problems], confound, controls)]
    make_reasoner(llm, base_url, model, OfflineReasoner(tax))  # ReasonerConfigError: exit 2
    config = RunConfig(methods=list(names), llm=llm, base_url=base_url, model=model, seed=seed,
                       history_file=str(history) if history else None, leave_one_out=leave_one_out, remove=remove,
                       knowledge=knowledge, workers=workers, timeout_s=timeout,
                       cache_dir=str(cache_dir) if cache_dir else None,
                       taxonomy_file=str(taxonomy_file) if taxonomy_file else None, trace=trace)

    def progress(row: dict[str, Any]) -> None:
        mark = "error" if row.get("error") else "ok" if row.get("leaf_ok") else "miss"
        got = row.get("error") or row.get("predicted") or "escalated"
        err.print(f"{mark:<5} {row['method']:<10} {row['id']:<30} {row['label']} -> {escape(str(got))[:160]} "
                  f"({row.get('wall_s') or 0:.1f}s)", highlight=False, soft_wrap=True)

    result = run_benchmark(config, problems, str(incidents), on_row=progress,
                           on_stage=lambda s: err.print(f"[dim]{escape(s)}[/]"))
    by_method = {name: [r for r in result.rows if r["method"] == name] for name in names.values()}
    metrics = {name: compute_metrics(rows) for name, rows in by_method.items()}
    for name, rows in by_method.items():
        if remove:
            before = [r for r in result.before_rows if r["method"] == name]
            metrics[name]["unseen"] = unseen_metrics(rows, before, result.removed)
    info = result.history
    parts = [f"seed {info.seed}" if seed else "no seed"]
    if history:
        parts.append(f"{history} {info.history}")
    if leave_one_out:
        parts.append(f"leave-one-out over the {info.leave_one_out} incidents themselves (own id excluded)")
    if taxonomy_file:
        parts.append(f"taxonomy {taxonomy_file}")
    if result.removed:
        parts.append(f"removed labels hidden: {', '.join(result.removed)}")
    fleet = "".join([f" (confound seed {confound})" if confound is not None else "",
                     " (controls: cause faults removed)" if controls else ""])
    meta = report.meta(command=command,
                       incidents=str(incidents) + fleet, n=len(problems),
                       history="; ".join(parts) + f" (total {info.total})",
                       llm=llm if llm == "offline" else f"{llm} {model} {base_url or ''}".strip(), workers=workers,
                       wall_s=result.wall_s)
    if info.rejected:
        err.print(f"[yellow]{len(info.rejected)} history record(s) rejected: {escape(info.rejected[0])} ...[/]")
    if out is not None:
        name = tag or run_tag(None, _tag(seed, history, leave_one_out, remove, llm, taxonomy_file), confound,
                              controls, False)
        for path in report.write(out, name, metrics, result.rows, meta):
            err.print(f"wrote {escape(str(path))}", highlight=False)
    return metrics
