"""The benchmark harness (eval/harness, `aidai eval`): metrics math on hand-made rows, fake methods through the
runner (a perfect one, one that always escalates, ones that raise or kill their worker), the unseen-label
taxonomy, faithful CVD on simulated hosts, false confirmations, controls and the per-view / per-node breakdowns,
neutral scenario paths, and one end-to-end CLI run of AidAI on simulated hosts; the records are written here."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.checks.manifest import load_manifest
from agent.cli.main import app
from agent.reasoning.base import Evidence, LeafJudgement
from agent.reasoning.offline import OfflineReasoner
from agent.report import Report, RootCause
from agent.taxonomy import load_taxonomy
from eval.harness.methods import CVD, Env, Outcome, primary_evidence, scenario_root
from eval.harness.metrics import compute_metrics, unseen_metrics
from eval.harness.problems import Problem, RecordsError, load_problems, remove_labels
from eval.harness.report import markdown, summary_line
from eval.harness.runner import RunConfig, run_benchmark

ECC = "GPU.MEMORY.UNCORRECTABLE_ECC"
REMAP = "GPU.MEMORY.ROW_REMAP_PENDING"
NVLINK = "INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT"
FAULTY = "GPU.HARDWARE.FAULTY_GPU"
RECORDS = [
    {"id": "t-ecc", "label": ECC, "faults": [{"fault": "gpu.ecc_uncorrectable", "gpu": 3}],
     "description": "Training died on rank 3: RuntimeError: CUDA error: uncorrectable ECC error encountered. "
                    "dmesg shows NVRM: Xid (PCI:0000:9d:00): 48, pid=2214, DBE (0x0000000c)."},
    {"id": "t-nvlink", "label": NVLINK, "faults": [{"fault": "nvlink.link_down", "gpu": 2, "links": [0, 1, 2, 3]}],
     "description": "All-reduce bandwidth on one 8xH100 node dropped by half after a reboot; "
                    "dmesg: NVRM: Xid (PCI:0000:4e:00): 74, NVLink: fatal error detected on link 0."},
]
HISTORY = [
    {"id": "h-ecc", "label": ECC, "description": "Job crashed with CUDA error: uncorrectable ECC error encountered; "
                                                "Xid 48 double bit ECC error in dmesg."},
]


# ---- fake methods (module:Class specs, importable by spawned workers) ----------------------------------------
class Perfect:
    name = "perfect"
    needs_embeddings = False

    def diagnose(self, problem: Problem, env: Env) -> Outcome:
        return Outcome(predicted=problem.label, confirmed=[problem.label], pipeline=2, path=["oracle"])


class Escalate:
    name = "escalate"
    needs_embeddings = False

    def diagnose(self, problem: Problem, env: Env) -> Outcome:
        return Outcome(predicted=None, pipeline=0, path=["gave up"])


class Raises(Perfect):
    name = "raises"

    def diagnose(self, problem: Problem, env: Env) -> Outcome:
        if problem.id == "t-nvlink":
            raise RuntimeError("boom in the method")
        return super().diagnose(problem, env)


class KillsWorker(Perfect):
    name = "kills"

    def diagnose(self, problem: Problem, env: Env) -> Outcome:
        if problem.id == "t-ecc":
            os._exit(3)  # the worker process dies without a Python exception
        return super().diagnose(problem, env)


def spec(cls: type) -> str:
    return f"{__name__}:{cls.__name__}"


def problems() -> list[Problem]:
    return [Problem(r) for r in RECORDS]


def config(tmp_path: Path, methods: list[str], workers: int = 0, **extra: Any) -> RunConfig:
    return RunConfig(methods=methods, seed=False, knowledge=False, workers=workers,
                     cache_dir=str(tmp_path / "cache"), **extra)


# ---- metrics math ---------------------------------------------------------------------------------------------
def row(label: str, predicted: str | None, **extra: Any) -> dict[str, Any]:
    return {"id": f"r{id(extra)}-{label}-{predicted}", "label": label, "predicted": predicted, "path": [],
            "pipeline": extra.pop("pipeline", None), "error": None, **extra}


def test_micro_and_macro_at_three_levels() -> None:
    rows = [row(ECC, ECC), row(REMAP, ECC), row(NVLINK, None), row(NVLINK, FAULTY)]
    m = compute_metrics(rows)
    # leaf: TP 1 (ecc), FP 2 (ecc for remap, faulty for nvlink), FN 3; the escalation is no false positive
    assert m["leaf"]["micro_precision"] == pytest.approx(1 / 3, abs=1e-4)
    assert m["leaf"]["micro_recall"] == pytest.approx(1 / 4, abs=1e-4)
    assert m["leaf"]["micro_f1"] == pytest.approx(2 / 7, abs=1e-4)
    # classes ecc (F1 2/3), remap, nvlink, faulty (F1 0 each); precision defined for ecc (.5), faulty (0)
    assert m["leaf"]["macro_f1"] == pytest.approx((2 / 3) / 4, abs=1e-4)
    assert m["leaf"]["macro_precision"] == pytest.approx(0.25, abs=1e-4)
    assert m["leaf"]["macro_recall"] == pytest.approx(1 / 3, abs=1e-4)
    # MAIN.SUB: GPU.MEMORY right twice, NVLINK missed twice, GPU.HARDWARE predicted once wrongly
    assert m["sub"]["micro_precision"] == pytest.approx(2 / 3, abs=1e-4)
    assert m["sub"]["micro_recall"] == pytest.approx(0.5, abs=1e-4)
    assert m["sub"]["micro_f1"] == pytest.approx(4 / 7, abs=1e-4)
    assert m["sub"]["macro_f1"] == pytest.approx(1 / 3, abs=1e-4)
    # MAIN: GPU (tp 2, fp 1: F1 .8), INTERCONNECT_NETWORKING (fn 2: F1 0)
    assert m["main"]["micro_f1"] == pytest.approx(4 / 7, abs=1e-4)
    assert m["main"]["macro_f1"] == pytest.approx(0.4, abs=1e-4)
    gpu = m["per_category"]["GPU"]
    assert gpu["n"] == 2 and gpu["predicted"] == 3
    assert gpu["leaf"] == {"precision": pytest.approx(1 / 3, abs=1e-4), "recall": 0.5, "f1": 0.4}
    assert gpu["main"]["precision"] == pytest.approx(2 / 3, abs=1e-4) and gpu["main"]["recall"] == 1.0
    assert m["per_category"]["INTERCONNECT_NETWORKING"]["leaf"]["precision"] is None  # never predicted
    assert [x["outcome"] for x in m["misses"]] == ["right category", "escalated", "wrong category"]


def test_pipeline_shares_errors_and_efficiency() -> None:
    rows = [row(ECC, ECC, pipeline=1, checks_run=4, check_s=10.0, wall_s=1.0),
            row(REMAP, ECC, pipeline=2, checks_run=8, check_s=30.0, wall_s=3.0),
            row(NVLINK, None, pipeline=0, checks_run=12, check_s=50.0, wall_s=5.0),
            {**row(NVLINK, None), "error": "RuntimeError: boom"}]
    m = compute_metrics(rows)
    assert m["n"] == 4 and m["errors"] == 1
    assert m["pipeline_share"] == {"1": 0.25, "1+2": 0.5, "1+2+3": 0.5}
    assert m["pipeline_share_correct"] == {"1": 0.25, "1+2": 0.25, "1+2+3": 0.25}
    assert m["checks_per_incident"] == 8.0 and m["check_seconds_per_incident"] == 30.0  # the error row is left out
    assert m["leaf"]["micro_recall"] == 0.25  # ... but counts as a miss
    assert compute_metrics([row(ECC, ECC)])["pipeline_share"] is None  # one-shot methods have no pipelines


def test_false_confirmations_controls_and_breakdowns_by_view_and_nodes() -> None:
    rows = [row(ECC, ECC, evidence="strong"),  # right, bare metal by default, one node by default
            row(REMAP, ECC, evidence="strong", view="vm"),  # wrong with strong evidence: a false confirmation
            row(NVLINK, FAULTY, evidence="weak", view="vm", nodes=16),  # wrong, but only weak evidence
            row(NVLINK, None, view="container", nodes=2),
            row(ECC, ECC, evidence="strong", control=True, nodes=2),  # a control that still names a cause
            row(NVLINK, None, control=True, view="vm", nodes=16)]  # a control left alone: right
    m = compute_metrics(rows)
    assert m["n"] == 6 and m["scored"] == 4
    assert m["false_confirmations"] == 1 and m["false_confirmation_rate"] == 0.25
    assert m["controls"] == 2 and m["controls_confirmed"] == 0.5 and m["controls_confirmed_n"] == 1
    assert m["controls_confirmed_strong"] == 0.5
    # P/R/F1 leave the controls out: TP 1, FP 2, FN 3 over the four incidents with a cause
    assert m["leaf"]["micro_precision"] == pytest.approx(1 / 3, abs=1e-4)
    assert m["leaf"]["micro_recall"] == 0.25 and m["resolved"] == 0.75
    assert m["misses"][-1]["outcome"] == "control confirmed (strong evidence)"
    assert list(m["by_view"]) == ["bare-metal", "container", "vm"]
    vm = m["by_view"]["vm"]
    assert vm["n"] == 3 and vm["scored"] == 2 and vm["leaf_micro_f1"] == 0.0
    assert vm["false_confirmations"] == 1 and vm["false_confirmation_rate"] == 0.5 and vm["controls_confirmed"] == 0.0
    bare = m["by_view"]["bare-metal"]
    assert bare["leaf_micro_f1"] == 1.0 and bare["controls_confirmed"] == 1.0
    assert list(m["by_nodes"]) == ["1", "2", "16"]  # by size, not by name
    assert m["by_nodes"]["1"]["n"] == 2 and m["by_nodes"]["1"]["false_confirmations"] == 1
    assert m["by_nodes"]["2"]["leaf_micro_f1"] == 0.0 and m["by_nodes"]["2"]["controls_confirmed"] == 1.0
    assert m["by_nodes"]["16"]["controls"] == 1 and m["by_nodes"]["16"]["controls_confirmed"] == 0.0


def test_a_run_of_only_controls_scores_controls_and_renders() -> None:
    rows = [row(ECC, ECC, evidence="none", control=True), row(NVLINK, None, control=True),
            row(REMAP, FAULTY, evidence="strong", control=True, check_s=733.0, active_check_s=655.0)]
    m = compute_metrics(rows)
    assert m["n"] == 3 and m["scored"] == 0 and m["controls_confirmed"] == pytest.approx(2 / 3, abs=1e-4)
    assert m["false_confirmations"] == 0 and m["false_confirmation_rate"] is None  # nothing had a cause to get wrong
    assert m["leaf"]["micro_f1"] is None and m["per_category"] == {} and m["resolved"] is None
    assert m["check_seconds_per_incident"] == 733.0 and m["active_check_seconds_per_incident"] == 655.0
    meta = {"date": "d", "commit": "c", "command": "x", "incidents": "f", "n": 3, "history": "h", "llm": "offline",
            "workers": 0, "wall_s": 1}
    text = markdown("controls", {"cvd": m}, meta)
    assert "| cvd | 3 | 0 | undefined |" in text and "| undefined (0) | 0.667 (2/3) |" in text
    assert "## Per view" in text and "| bare-metal | cvd | 3 | 0 | undefined | undefined (0) | 0.667 (2/3) |" in text
    assert "## Per node count" in text
    assert "controls confirmed 0.667 (2/3)" in summary_line("cvd", m)


def test_evidence_of_the_primary_root_cause_comes_from_its_confirming_judgement() -> None:
    def judged(label: str, status: str, strength: str) -> LeafJudgement:
        return LeafJudgement(label=label, status=status, confidence=0.9, why="",  # type: ignore[arg-type]
                             evidence=Evidence(strength=strength))  # type: ignore[arg-type]

    report = Report(run_id="r", resolved=True, pipeline=2,
                    root_causes=[RootCause(label=ECC, confidence=0.9, evidence=[], why=""),
                                 RootCause(label=REMAP, confidence=0.5, evidence=[], why="")],
                    hypotheses=[judged(ECC, "inconclusive", "unknown"), judged(REMAP, "confirmed", "weak"),
                                judged(ECC, "confirmed", "strong")])
    assert primary_evidence(report) == "strong"
    assert primary_evidence(report.model_copy(update={"hypotheses": [judged(ECC, "confirmed", "unknown")]})) == "none"
    assert primary_evidence(Report(run_id="r", resolved=False, pipeline=0)) is None


def test_scenario_paths_never_carry_the_incident_id() -> None:
    ids = ["dev-0007-deepspeed_bug", "t-ecc", "a/b:c"]
    roots = {(method, i): scenario_root(Path("/w"), method, Problem({"id": i, "label": ECC}))
             for method in ("aidai", "cvd", "tests.mod:Fake") for i in ids}
    assert len(set(roots.values())) == len(roots)  # unique per (method, incident)
    for (method, i), root in roots.items():
        assert root.parent == Path("/w")
        assert i not in str(root) and "deepspeed" not in str(root) and method not in root.name
    assert roots[("cvd", "t-ecc")] == scenario_root(Path("/w"), "cvd", Problem({"id": "t-ecc", "label": ECC}))


# ---- faithful CVD on simulated hosts -----------------------------------------------------------------------------
def test_cvd_runs_every_check_active_ones_included_on_every_host_then_chooses_once(tmp_path: Path) -> None:
    taxonomy = load_taxonomy()
    problem = Problem({**RECORDS[1], "hosts": ["node-1", "node-2"]})
    hosts = problem.materialize(scenario_root(tmp_path, "cvd", problem))
    env = Env(taxonomy=taxonomy, offline=OfflineReasoner(taxonomy), hosts=hosts, data_dir=str(tmp_path),
              retrieval=None)  # type: ignore[arg-type]  # CVD retrieves no history
    outcome = CVD().diagnose(problem, env)
    checks = load_manifest().checks
    active = [c for c in checks if c.tier != "passive"]
    assert active  # the manifest has active checks, and CVD runs them (approved)
    assert outcome.checks["checks_run"] == 2 * len(checks) and outcome.checks["active_checks"] == 2 * len(active)
    assert outcome.checks["check_s"] == pytest.approx(2 * sum(c.expected_cost_s for c in checks))
    assert outcome.checks["active_check_s"] == pytest.approx(2 * sum(c.expected_cost_s for c in active))
    assert outcome.predicted == NVLINK and outcome.confirmed == [NVLINK] and outcome.evidence == "strong"
    assert outcome.usage["llm_calls"] == 0 and outcome.pipeline is None


# ---- fake methods through the runner ---------------------------------------------------------------------------
def test_perfect_scores_one_and_escalating_has_recall_zero_and_undefined_precision(tmp_path: Path) -> None:
    result = run_benchmark(config(tmp_path, [spec(Perfect), spec(Escalate)]), problems())
    assert len(result.rows) == 4 and all(r["error"] is None for r in result.rows)
    perfect = compute_metrics([r for r in result.rows if r["method"] == "perfect"])
    for level in ("leaf", "sub", "main"):
        assert {k: perfect[level][k] for k in ("micro_f1", "macro_f1", "micro_precision", "micro_recall")} == {
            "micro_f1": 1.0, "macro_f1": 1.0, "micro_precision": 1.0, "micro_recall": 1.0}
    escalate = compute_metrics([r for r in result.rows if r["method"] == "escalate"])
    for level in ("leaf", "sub", "main"):
        assert escalate[level]["micro_recall"] == 0.0
        assert escalate[level]["micro_precision"] is None
        assert escalate[level]["macro_precision"] is None
        assert escalate[level]["micro_f1"] == 0.0
    assert escalate["resolved"] == 0.0 and escalate["escalated"] == 2
    meta = {"date": "d", "commit": "c", "command": "x", "incidents": "f", "n": 2, "history": "h", "llm": "offline",
            "workers": 0, "wall_s": 1}
    text = markdown("t", {"perfect": perfect, "escalate": escalate}, meta)
    assert "| escalate | 2 | 0 | 0.000 | undefined | 0.000 | 0.000 |" in text


def test_a_raising_method_and_a_dying_worker_become_error_rows_and_the_run_goes_on(tmp_path: Path) -> None:
    result = run_benchmark(config(tmp_path, [spec(Raises), spec(KillsWorker)], workers=2, timeout_s=60),
                           problems())
    by = {(r["method"], r["id"]): r for r in result.rows}
    assert len(by) == 4
    assert by[("raises", "t-ecc")]["predicted"] == ECC and by[("raises", "t-ecc")]["error"] is None
    assert "boom in the method" in by[("raises", "t-nvlink")]["error"]
    assert by[("kills", "t-ecc")]["error"].startswith("WorkerCrashed")
    assert by[("kills", "t-nvlink")]["predicted"] == NVLINK  # re-run after the pool broke
    m = compute_metrics([r for r in result.rows if r["method"] == "kills"])
    assert m["errors"] == 1 and m["leaf"]["micro_recall"] == 0.5


# ---- unseen labels -----------------------------------------------------------------------------------------------
def test_remove_label_drops_the_leaf_and_an_emptied_parent() -> None:
    full = load_taxonomy()
    taxonomy, removed = remove_labels(full, [ECC])
    assert removed == [ECC]
    assert ECC not in taxonomy.labels() and REMAP in taxonomy.labels()
    assert not taxonomy.validate()
    assert all(ECC not in spec.nodes for spec in taxonomy.manifest.checks)
    only_child = "GPU.POWER.PSU_INSUFFICIENT"
    assert [n.label for n in full.node("GPU.POWER").children] == [only_child]
    taxonomy, removed = remove_labels(full, [only_child])
    assert removed == [only_child, "GPU.POWER"]
    assert "GPU.POWER" not in taxonomy.labels() and "GPU" in taxonomy.labels()
    assert len(taxonomy.leaves()) == len(full.leaves()) - 1
    with pytest.raises(KeyError):
        remove_labels(full, ["GPU.NOT_A_NODE"])


def test_unseen_metrics_say_what_happened_instead() -> None:
    after = [row(ECC, REMAP), row(ECC, None, explored=[REMAP]), row(ECC, NVLINK), row(NVLINK, NVLINK)]
    for i, r in enumerate(after):
        r["id"] = f"u{i}"
    before = [{**r, "predicted": r["label"]} for r in after]
    u = unseen_metrics(after, before, [ECC])
    assert u["affected"] == 3 and u["accuracy_before"] == 1.0
    assert [r["outcome"] for r in u["rows"]] == ["sibling under GPU.MEMORY",
                                                 "escalated, exploration points under GPU.MEMORY", "other category"]
    assert u["accuracy_after"] == pytest.approx(1 / 3, abs=1e-4) and u["escalated"] == pytest.approx(1 / 3, abs=1e-4)


# ---- end to end: the CLI on simulated hosts -------------------------------------------------------------------
def test_cli_json_end_to_end_with_history_leave_one_out_and_a_removed_label(tmp_path: Path) -> None:
    incidents = tmp_path / "incidents.jsonl"
    incidents.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    history = tmp_path / "history.jsonl"
    history.write_text("".join(json.dumps(r) + "\n" for r in HISTORY))
    assert [p.id for p in load_problems(incidents)] == ["t-ecc", "t-nvlink"]
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [
        "eval", "--incidents", str(incidents), "--history", str(history), "--no-seed", "--no-knowledge",
        "--leave-one-out", "--method", "aidai", "--remove-label", ECC, "--workers", "0",
        "--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--tag", "e2e", "--json"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)
    for key in ("n", "errors", "leaf", "sub", "main", "per_category", "pipeline_share", "checks_per_incident",
                "check_seconds_per_incident", "llm_calls_per_incident", "tokens_in_per_incident",
                "tokens_out_per_incident", "wall_s_per_incident"):
        assert key in metrics, key
    for level in ("leaf", "sub", "main"):
        assert {"micro_f1", "macro_f1", "micro_precision", "micro_recall"} <= set(metrics[level])
    assert metrics["n"] == 2 and metrics["errors"] == 0
    assert metrics["checks_per_incident"] > 0 and metrics["check_seconds_per_incident"] > 0
    assert metrics["llm_calls_per_incident"] == 0  # the offline reasoner
    unseen = metrics["unseen"]
    assert unseen["affected"] == 1 and unseen["accuracy_before"] == 1.0  # with the label, it was found
    ecc_after = unseen["rows"][0]
    assert ecc_after["predicted"] != ECC  # the label does not exist any more: a sibling, something else, or none
    rows = [json.loads(line) for line in (out / "e2e.rows.jsonl").read_text().splitlines()]
    nvlink = next(r for r in rows if r["id"] == "t-nvlink")
    assert nvlink["predicted"] == NVLINK and nvlink["checks_run"] > 0 and nvlink["evidence"] == "strong"
    # leave-one-out: its own record (in the DB, similarity 1) is never retrieved, and the ECC past incidents are
    # hidden with their label, so pipeline 1 has nothing to test and the taxonomy walk finds it
    assert nvlink["pipeline"] == 2 and not any(step.startswith("p1 ") for step in nvlink["path"])
    assert "## Unseen labels" in (out / "e2e.md").read_text()
    assert "e2e" in json.loads((out / "metrics.json").read_text())


def test_cli_rejects_bad_input(tmp_path: Path) -> None:
    incidents = tmp_path / "incidents.jsonl"
    incidents.write_text(json.dumps(RECORDS[0]) + "\n{not json\n")
    result = CliRunner().invoke(app, ["eval", "--incidents", str(incidents)])
    assert result.exit_code == 2 and "line 2" in result.output
    incidents.write_text(json.dumps(RECORDS[0]) + "\n")
    result = CliRunner().invoke(app, ["eval", "--incidents", str(incidents), "--method", "nope"])
    assert result.exit_code == 2 and "unknown method" in result.output


def test_a_bad_incident_file_names_every_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = {"id": "a", "description": "Xid 48 on GPU 1", "label": ECC, "profile": "A100-SXM-8",
            "faults": [{"fault": "gpu.ecc_uncorrectable", "gpu": 1}]}
    path.write_text(json.dumps(good) + "\nnot json\n" + json.dumps({**good, "description": "again"}) + "\n")
    with pytest.raises(RecordsError) as caught:
        load_problems(path)
    assert "line 2: invalid JSON" in str(caught.value) and "line 3: duplicate id" in str(caught.value)
    path.write_text(json.dumps(good) + "\n")
    assert load_problems(path)[0].record == good  # kept as read: fault params and profile reach the simulator


def test_openai_reasoner_through_the_harness_counts_calls_and_tokens_per_incident(tmp_path: Path) -> None:
    from tests.openai_stub import OpenAIStub
    from tests.test_diagnosis import _most_credulous

    with OpenAIStub() as stub:
        stub.responder = lambda request: json.dumps(
            _most_credulous(request["response_format"]["json_schema"]["schema"]))
        result = run_benchmark(config(tmp_path, ["did", "aidai", "cvd"], llm="openai", base_url=stub.base_url,
                                      model=stub.model), problems())
    rows = {(r["method"], r["id"]): r for r in result.rows}
    assert all(r["error"] is None for r in result.rows), [r["error"] for r in result.rows]
    for record in RECORDS:
        did, ours, cvd = (rows[(m, record["id"])] for m in ("did", "aidai", "cvd"))
        assert did["llm_calls"] == 1 and did["tokens_in"] > 0 and did["checks_run"] == 0  # one choice, no checks
        assert ours["llm_calls"] > 1 and ours["tokens_out"] > 0
        assert ours["predicted"] == record["label"]  # the credulous model confirms everything; evidence decides
        # CVD: every check first, then one call; the stub takes the first offered leaf, and the evidence leads
        assert cvd["llm_calls"] == 1 and cvd["active_checks"] > 0 and cvd["predicted"] == record["label"]
        assert cvd["evidence"] == "strong" and did["evidence"] is None
    metrics = compute_metrics([r for r in result.rows if r["method"] == "did"])
    assert metrics["llm_calls_per_incident"] == 1.0 and metrics["tokens_in_per_incident"] > 0
