"""`aidai eval --confound SEED` and `--controls` (eval/harness/confound.py): draws are reproducible per seed and
record, latent faults never are (or mask) the cause, a multi-node job carries its cause on one node, controls drop
the cause and keep the rest, the flags reach the runs, and a row re-creates its scenario with `aidai sim create`.
The records are written here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.cli.eval_cmd import parse_seeds, run_tag
from agent.cli.main import app
from agent.sim.faults.registry import REGISTRY, resolve
from eval.harness.confound import (
    VIEWS,
    cause_footprint,
    confound_record,
    confound_records,
    control_record,
    latent_weights,
    load_rates,
    named_node_count,
    view_weights,
)
from eval.harness.methods import Env, Outcome
from eval.harness.problems import Problem

ECC = "GPU.MEMORY.UNCORRECTABLE_ECC"
RECORDS: list[dict[str, Any]] = [
    {"id": "c-ecc", "label": ECC, "faults": [{"fault": "gpu.ecc_uncorrectable", "gpu": 3}],
     "noise": [{"fault": "noise.correctable_ecc"}], "hosts": ["node-1"],
     "description": "Training died: CUDA error: uncorrectable ECC error encountered; Xid 48 on GPU 3.",
     "environment": "8x H100 SXM server, driver 535"},
    {"id": "c-ib", "label": "INTERCONNECT_NETWORKING.IB.PORT_DOWN", "faults": [{"fault": "ib.port_down",
                                                                                 "hca": "mlx5_3"}],
     "description": "NCCL all-reduce across 2 nodes hangs; NET/IB: port mlx5_3 is down on one of them.",
     "environment": "two DGX H100 nodes, InfiniBand NDR"},
    {"id": "c-driver", "label": "SYSTEM_SOFTWARE.DRIVER.DRIVER_BUG", "faults": [{"fault": "driver.known_bug"}],
     "description": "Multi-node training crashes after the driver upgrade with Xid 13 on every node.",
     "environment": "Kubernetes cluster (EKS), p5.48xlarge"},
    {"id": "c-skew", "label": "FRAMEWORK_LIBRARY.NCCL.VERSION_MISMATCH_ACROSS_NODES",
     "faults": [{"fault": "fw.nccl_version_skew"}],
     "description": "torchrun --nnodes 4: NCCL init fails, one node runs an older image.", "environment": ""},
    {"id": "c-two", "label": "INTERCONNECT_NETWORKING.ROCE.MTU_MISMATCH", "hosts": ["node-1", "node-2"],
     "faults": [{"fault": "roce.mtu_mismatch", "host": "node-2"}],
     "description": "ib_write_bw between two servers fails: MTU 1024 vs 4096.", "environment": ""},
    {"id": "c-xid", "label": "GPU.HARDWARE.FAULTY_GPU", "faults": [{"fault": "gpu.faulty", "gpu": 5}],
     "description": "Multi-node pre-training: NCCL watchdog timeout after Xid 62 on one rank's GPU.",
     "environment": "Slurm, H100 nodes"},
    {"id": "c-nvl", "label": "INTERCONNECT_NETWORKING.NVLINK.NVLINK_NOT_ENABLED",
     "faults": [{"fault": "nvlink.not_enabled"}],
     "description": "P2P bandwidth is PCIe-level on a single 8-GPU box; nvidia-smi topo shows SYS.", "environment": ""},
]


def by_id(rid: str) -> dict[str, Any]:
    return next(r for r in RECORDS if r["id"] == rid)


# ---- drawing --------------------------------------------------------------------------------------------------
def test_same_seed_same_fleet_in_any_order_and_other_seeds_differ() -> None:
    one = confound_records(RECORDS, 1)
    assert one == confound_records(RECORDS, 1)
    again = {r["id"]: r for r in confound_records(list(reversed(RECORDS)), 1)}
    assert [again[r["id"]] for r in one] == one  # a record's draws do not depend on its neighbours
    for seed in (2, 3):
        other = confound_records(RECORDS, seed)
        assert other != one
        assert all(r["confound_seed"] == seed for r in other)
    assert RECORDS[0].get("latent") is None and "view" not in RECORDS[0]  # the input is never changed


def test_drawn_fields_are_well_formed_and_kept_when_the_record_has_them() -> None:
    for seed in range(20):
        for record in confound_records(RECORDS, seed):
            assert record["view"] in VIEWS
            for latent in record["latent"]:
                assert latent["host"] in record["hosts"]
                assert 2.0 <= latent["age_h"] <= 720.0
                resolve({k: v for k, v in latent.items() if k != "age_h"}, want_noise=False)  # the sim knows it
            assert "at" not in record  # not drawn: the scenario's time stays its creation time
    given = {**RECORDS[0], "view": "vm", "latent": [{"fault": "driver.persistence_off", "age_h": 5}]}
    kept = confound_record(given, 7)
    assert kept["view"] == "vm" and kept["latent"] == given["latent"]


def test_every_rate_names_a_simulated_fault_and_exclusions_never_draw() -> None:
    rates = load_rates()
    named = set(rates["latent"]["exclude"]) | {f for members in rates["latent"]["groups"].values() for f in members}
    for cat in rates["latent"]["categories"].values():
        named |= set(cat["faults"])
    assert named <= set(REGISTRY), named - set(REGISTRY)
    weights = latent_weights(rates)
    assert not set(weights) & set(rates["latent"]["exclude"])
    assert all(REGISTRY[f].leaf for f in weights)  # faults, never noise
    counts = [c["count"] for c in rates["latent"]["categories"].values()]
    assert sum(counts) == 419  # Llama 3 Table 5: every unexpected interruption of the 54-day snapshot


@pytest.mark.parametrize("rid", [r["id"] for r in RECORDS])
def test_latent_never_is_masks_or_contradicts_the_cause(rid: str) -> None:
    rates = load_rates()
    exclude = set(rates["latent"]["exclude"])
    groups = rates["latent"]["groups"]
    record = by_id(rid)
    cause = cause_footprint(record["faults"], rates)
    for seed in range(60):
        drawn = confound_record(record, seed)
        seen: dict[str, set[str]] = {}
        gpus = set(cause.gpus)
        distinct = {json.dumps({k: v for k, v in x.items() if k != "host"}, sort_keys=True): x
                    for x in drawn["latent"]}  # a job-wide version fault is on every node: one fault
        for latent in drawn["latent"]:
            fid = latent["fault"]
            if latent is not distinct[json.dumps({k: v for k, v in latent.items() if k != "host"}, sort_keys=True)]:
                assert fid in rates["job_wide"]
                continue
            assert fid not in exclude and fid not in cause.ids
            assert REGISTRY[fid].leaf not in cause.leaves
            mine = {g for g, members in groups.items() if fid in members}
            assert not mine & cause.groups, (seed, fid)
            assert not mine & seen.get(latent["host"], set()), (seed, fid)  # no two of a group on one host
            seen.setdefault(latent["host"], set()).update(mine)
            if "gpu" in latent:
                assert latent["gpu"] not in gpus, (seed, latent)  # never the cause's GPU, never repeated
                gpus.add(latent["gpu"])
            if "hca" in latent:
                assert latent["hca"] not in cause.hcas
    assert cause_footprint(by_id("c-ecc")["faults"], rates).gpus == {3}
    assert cause_footprint(by_id("c-ib")["faults"], rates).hcas == {"mlx5_3"}
    assert "nvlink_state" in cause_footprint(by_id("c-nvl")["faults"], rates).groups


def test_latent_counts_and_kinds_follow_the_rates_over_many_records() -> None:
    many = [{**RECORDS[0], "id": f"r{i}"} for i in range(400)]
    drawn = confound_records(many, 5)
    counts = [len(r["latent"]) for r in drawn]
    assert 0 in counts and 3 in counts and max(counts) <= 3
    kinds = [latent["fault"] for r in drawn for latent in r["latent"]]
    # Llama 3: faulty GPU (148 of 419) outweighs the whole software-bug category (54)
    assert kinds.count("gpu.faulty") > kinds.count("driver.known_bug")


def test_view_cues_in_the_text_raise_their_view() -> None:
    rates = load_rates()
    base = view_weights(RECORDS[0], rates)
    assert base == {k: float(v) for k, v in rates["view"]["base"].items()}
    k8s = view_weights(by_id("c-driver"), rates)
    assert k8s["container"] > base["container"] and k8s["vm"] > base["vm"]  # EKS pods on p5 VMs
    views = [r["view"] for r in confound_records([{**by_id("c-driver"), "id": f"k{i}"} for i in range(200)], 3)]
    assert views.count("container") > views.count("bare-metal")


# ---- nodes ----------------------------------------------------------------------------------------------------
def test_node_count_from_the_text() -> None:
    rates = load_rates()
    assert named_node_count("all-reduce across 2 nodes hangs", rates) == 2
    assert named_node_count("a 64 nodes job", rates) == 8  # capped
    assert named_node_count("Multi-node training crashes", rates) == 0  # drawn
    assert named_node_count("node-3 and node-7 disagree", rates) == 0
    assert named_node_count("one 8-GPU box, GPU 3 fell off the bus on node1", rates) is None


def test_multi_node_draw_puts_the_cause_on_exactly_one_node() -> None:
    for seed in range(30):
        ib = confound_record(by_id("c-ib"), seed)
        assert ib["hosts"] == ["node-1", "node-2"]
        assert len({f["host"] for f in ib["faults"]}) == 1 and ib["faults"][0]["host"] in ib["hosts"]
        xid = confound_record(by_id("c-xid"), seed)
        assert len(xid["hosts"]) in (2, 4, 8) and len(xid["faults"]) == 1 and xid["faults"][0]["host"] in xid["hosts"]
        driver = confound_record(by_id("c-driver"), seed)  # a driver version is the image's: on every node
        assert [f["host"] for f in driver["faults"]] == driver["hosts"] and len(driver["hosts"]) in (2, 4, 8)
        for drawn in (xid, driver):
            for latent in drawn["latent"]:
                if latent["fault"] in load_rates()["job_wide"]:  # a latent version, too, is on every node
                    same = [x["host"] for x in drawn["latent"] if x == {**latent, "host": x["host"]}]
                    assert sorted(same) == sorted(drawn["hosts"])
        skew = confound_record(by_id("c-skew"), seed)
        assert len(skew["hosts"]) == 4 and "host" not in skew["faults"][0]  # scenario scope: across the nodes
        two = confound_record(by_id("c-two"), seed)
        assert two["hosts"] == ["node-1", "node-2"] and two["faults"] == by_id("c-two")["faults"]  # kept
        single = confound_record(RECORDS[0], seed)
        assert single["hosts"] == ["node-1"] and "host" not in single["faults"][0]
    cause_hosts = {confound_record(by_id("c-xid"), s)["faults"][0]["host"] for s in range(30)}
    assert len(cause_hosts) > 1  # drawn, not always the first node


# ---- controls -------------------------------------------------------------------------------------------------
def test_controls_drop_the_cause_and_keep_latent_noise_and_hosts() -> None:
    drawn = confound_records(RECORDS, 4)
    controls = confound_records(RECORDS, 4, controls=True)
    for record, control in zip(drawn, controls, strict=True):
        assert control["faults"] == [] and control["control"] is True
        for key in ("latent", "noise", "hosts", "view", "label", "id", "confound_seed"):
            assert control.get(key) == record.get(key), key
    plain = control_record(RECORDS[0])
    assert plain["faults"] == [] and plain["noise"] == RECORDS[0]["noise"] and "latent" not in plain
    problem = Problem(controls[0])
    assert problem.evaluate(None) == {"leaf_ok": True, "sub_ok": True, "main_ok": True}
    assert problem.evaluate(ECC) == {"leaf_ok": False, "sub_ok": False, "main_ok": False}
    fields = problem.scenario_fields()
    assert fields["control"] is True and fields["faults"] == [] and fields["nodes"] == len(controls[0]["hosts"])


# ---- the CLI --------------------------------------------------------------------------------------------------
class Perfect:
    name = "perfect"
    needs_embeddings = False

    def diagnose(self, problem: Problem, env: Env) -> Outcome:
        return Outcome(predicted=problem.label, confirmed=[problem.label], pipeline=2, path=["oracle"])


def test_seed_flags_parse_and_name_the_runs() -> None:
    assert parse_seeds(["1,2", "3", "2"]) == [1, 2, 3]
    assert parse_seeds(None) == []
    assert run_tag(None, "no-history", 2, False, True) == "no-history_confound-2"
    assert run_tag(None, "no-history", 1, True, False) == "no-history_confound-1_controls"
    assert run_tag(None, "no-history", None, True, False) == "no-history_controls"
    assert run_tag("fleet", "x", 3, False, True) == "fleet-3" and run_tag("fleet", "x", 3, False, False) == "fleet"


def run_eval(tmp_path: Path, *flags: str) -> Any:
    incidents = tmp_path / "incidents.jsonl"
    incidents.write_text("".join(json.dumps(r) + "\n" for r in RECORDS[:3]))
    return CliRunner().invoke(app, [
        "eval", "--incidents", str(incidents), "--no-seed", "--no-knowledge", "--method", f"{__name__}:Perfect",
        "--workers", "0", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out"), *flags])


def test_cli_confound_seeds_and_controls_write_rows_that_re_create_their_scenario(tmp_path: Path) -> None:
    result = run_eval(tmp_path, "--confound", "1,2", "--json")
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert list(runs) == ["no-history_confound-1", "no-history_confound-2"]
    rows = [json.loads(line) for line in (tmp_path / "out" / "no-history_confound-1.rows.jsonl").read_text()
            .splitlines()]
    expected = {r["id"]: r for r in confound_records(RECORDS[:3], 1)}
    for row in rows:
        want = expected[row["id"]]
        assert row["confound_seed"] == 1 and row["control"] is False and row["error"] is None
        for key in ("faults", "noise", "latent", "view", "hosts"):
            assert row[key] == want.get(key, []), key
        assert row["nodes"] == len(want["hosts"]) and row["profile"] == "H100-SXM-8" and row["at"] is None
        assert "evidence" in row
    result = run_eval(tmp_path, "--confound", "1", "--controls", "--tag", "ctl")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "out" / "ctl.rows.jsonl").read_text().splitlines()]
    assert rows and all(r["control"] is True and r["faults"] == [] for r in rows)
    assert [r["latent"] for r in rows] == [expected[r["id"]]["latent"] for r in rows]
    assert not any(r["leaf_ok"] for r in rows)  # the oracle names the removed cause: wrong on a control

    # any row re-creates its scenario: `aidai sim create DIR --record rows.jsonl --id ID`
    rows_file = tmp_path / "out" / "no-history_confound-2.rows.jsonl"
    rows = {r["id"]: r for r in map(json.loads, rows_file.read_text().splitlines())}
    row = rows["c-driver"]  # multi-node, drawn view
    assert row["nodes"] >= 2
    target = tmp_path / "again"
    created = CliRunner().invoke(app, ["sim", "create", str(target), "--record", str(rows_file), "--id", "c-driver"])
    assert created.exit_code == 0, created.output
    meta = json.loads((target / "scenario.json").read_text())
    for key in ("faults", "noise", "latent", "view", "hosts", "profile"):
        assert meta[key] == row[key], key
    direct = Problem(confound_records([by_id("c-driver")], 2)[0])
    direct.materialize(tmp_path / "direct")
    again = json.loads((tmp_path / "direct" / "scenario.json").read_text())
    assert {k: v for k, v in again.items() if k != "at"} == {k: v for k, v in meta.items() if k != "at"}
