"""`aidai diagnose` on the texts people paste (issue 34, item 3): each lab job's pasted.txt with --logs at its logs.

    python -m eval.lab.diagnose JOBS_DIR [--seeds 201-203] [--host sim|local] [--limit N] [--out FILE --title T]
    python -m eval.lab.diagnose - --from-rows ROWS.jsonl [--limit N] [--out FILE --title T]

The lab's nodes are CPU namespaces without a GPU. `--host local` shows what a user on such a machine gets; `--host
sim` (the default) names a healthy simulated GPU fleet with the job's own hostnames (`aidai sim create --hosts`),
so the taxonomy search and its checks run and every check passes: what is confirmed or suspected then comes from
the pasted text and the logs alone. The truth file is read only to score the answer.

Scored per job: the MAIN category (the first part of the label) of the answer, which is the first confirmed root
cause, else the first suspected label, else the first category the search entered; the MAIN category the search
entered first (the text's ranking before any check); the leaf, where the taxonomy has one for the lab's fault; and
whether any confirmed or suspected label blames hardware. The issue's bar: MAIN >= 0.90, and for the user-code and
configuration faults the leaf >= 0.85.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from eval.l4.lab import jobs_in, parse_seeds, publish

ROOT = Path(__file__).resolve().parent.parent.parent
# this checkout's aidai (`-m` from ROOT: the checkout, not whichever one the venv installed)
AIDAI = [sys.executable, "-m", "agent.cli.main"]
TIMEOUT_S = 600

# What each lab fault is, in the taxonomy's terms: its MAIN category and the leaves that name it (None: the
# taxonomy has no leaf for it; the leaf is then not scored).
EXPECTED: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "exception": ("USER_APPLICATION", ("USER_APPLICATION.CODE.SCRIPT_ERROR",)),  # an IndexError in the script
    "exit": ("USER_APPLICATION", ("USER_APPLICATION.CODE.SCRIPT_ERROR",)),  # the script calls os._exit(N)
    # a rank stops calling collectives
    "hang": ("USER_APPLICATION", ("USER_APPLICATION.CODE.RANK0_ONLY_WORK_TIMEOUT",)),
    # the user's NaN guard raises on corrupt rows
    "nan": ("USER_APPLICATION", ("USER_APPLICATION.CODE.NON_FINITE_LOSS",)),
    # a leak in the script under `ulimit -v`, and under a container memory limit
    "oom_rlimit": ("USER_APPLICATION", ("USER_APPLICATION.CODE.HOST_MEMORY_EXHAUSTED",)),
    "oom_cgroup": ("USER_APPLICATION", ("USER_APPLICATION.CODE.HOST_MEMORY_EXHAUSTED",)),
    # one node runs an older checkout (another model width)
    "code_skew": ("USER_APPLICATION", ("USER_APPLICATION.CODE.CODE_VERSION_SKEW",)),
    # the rendezvous port is taken: a launch configuration fault
    "port_taken": ("USER_APPLICATION", ("USER_APPLICATION.CONFIG.RENDEZVOUS_PORT_IN_USE",)),
    "ifname": ("INTERCONNECT_NETWORKING", ("INTERCONNECT_NETWORKING.SOCKET.IFNAME_MISCONFIG",)),
    # a node's address dropped by the firewall
    "partition": ("INTERCONNECT_NETWORKING", ("INTERCONNECT_NETWORKING.SOCKET.PEER_UNREACHABLE",)),
    "missing_shard": ("OTHER", ("OTHER.STORAGE.DATA_FILES_PURGED",)),
    "disk_full": ("OTHER", ("OTHER.STORAGE.DISK_FULL",)),  # the checkpoint directory's file system is full
    # a whole node's processes killed (power, OOM killer, a policy tool)
    "sigkill": ("OTHER", ("OTHER.PLATFORM.NODE_LOST",)),
    "straggler": ("OTHER", None),  # a node's CPU throttled by a quota: no leaf (nothing in the logs names it)
}
# the user-code and configuration faults: their leaf is scored against the bar (0.85)
CONFIG_FAULTS = {"port_taken"}
USER_FAULTS = {"exception", "exit", "hang", "nan", "oom_rlimit", "oom_cgroup", "code_skew"}
# labels that blame hardware (the GPU, its links, the host's hardware)
HARDWARE = ("GPU.", "OTHER.PLATFORM.HOST_HARDWARE_FAULT", "OTHER.PLATFORM.HOST_MEMORY_FAULT",
            "INTERCONNECT_NETWORKING.NVLINK.LINK_HARDWARE_FAULT", "INTERCONNECT_NETWORKING.PCIE.RISER_OR_SLOT_FAULT",
            "INTERCONNECT_NETWORKING.IB.PORT_DOWN", "INTERCONNECT_NETWORKING.IB.LINK_FLAPPING",
            "OTHER.FACILITY.THERMAL_SHUTDOWN")


def answer(report: dict) -> tuple[str, list[str], list[str]]:
    """(the answer's label, confirmed labels, suspected labels) of a `diagnose --json` report."""
    confirmed = [r["label"] for r in report.get("root_causes", []) if r.get("label")]
    suspected = [r["label"] for r in report.get("suspected", []) if r.get("label")]
    entered = [step.split(":")[0] for step in report.get("path", []) if step.endswith(":enter")]
    label = (confirmed or suspected or entered or [""])[0]
    return label, confirmed, suspected


def diagnose(job: Path, host: str, work: Path) -> dict:
    truth = json.loads((job / "truth.json").read_text())
    spec = "local"
    if host == "sim":
        fleet = work / job.name
        hosts = ",".join(n["host"] for n in truth["nodes"])
        subprocess.run([*AIDAI, "sim", "create", str(fleet), "--hosts", hosts], check=True, timeout=120,
                       capture_output=True, cwd=ROOT)
        spec = f"sim:{fleet}"
    began = time.time()
    proc = subprocess.run([*AIDAI, "diagnose", "--file", str(job / "pasted.txt"), "--logs", str(job / "logs"),
                           "--host", spec, "--json"], timeout=TIMEOUT_S, capture_output=True, cwd=ROOT)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        report = {}
    label, confirmed, suspected = answer(report)
    main, leaves = EXPECTED[truth["fault"]]
    # the search's first category: where the incident's text (and L4) ranked the taxonomy before any check ran
    first = next((step.split(":")[0] for step in report.get("path", []) if step.endswith(":enter")), "")
    return {"job": job.name, "fault": truth["fault"], "launcher": truth["launcher"], "label": label,
            "main_ok": label.split(".")[0] == main, "leaf_ok": None if leaves is None else label in leaves,
            "first_main": first, "first_ok": first == main, "pipeline": report.get("pipeline"),
            "hardware": any(lab.startswith(HARDWARE) for lab in confirmed + suspected),
            "user": truth["fault"] in USER_FAULTS, "seconds": round(time.time() - began, 1),
            "confirmed": confirmed, "suspected": suspected, "exit": proc.returncode}


def _rate(values: list[bool]) -> str:
    return f"{sum(values) / len(values):.2f} ({sum(values)}/{len(values)})" if values else "-"


def table(rows: list[dict], by: str) -> list[str]:
    out = [f"| {by} | jobs | MAIN of the answer | MAIN ranked first | leaf (where the taxonomy has one) | "
           "hardware blamed | answers |", "|---|---|---|---|---|---|---|"]
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r[by]].append(r)
        groups["**all**"].append(r)
    for name, grp in sorted(groups.items(), key=lambda kv: (kv[0] == "**all**", kv[0])):
        labels: dict[str, int] = defaultdict(int)
        for r in grp:
            labels[r["label"] or "(none)"] += 1
        common = ", ".join(f"{lab} {n}" for lab, n in sorted(labels.items(), key=lambda kv: -kv[1])[:3])
        leaf = [r["leaf_ok"] for r in grp if r["leaf_ok"] is not None]
        out.append(f"| {name} | {len(grp)} | {_rate([r['main_ok'] for r in grp])} | "
                   f"{_rate([r.get('first_ok', False) for r in grp])} | {_rate(leaf)} | "
                   f"{_rate([r['hardware'] for r in grp])} | {common if by == 'fault' else ''} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", type=Path, nargs="+")
    ap.add_argument("--seeds", help="only jobs of these seeds, e.g. 201-203")
    ap.add_argument("--host", choices=("sim", "local"), default="sim")
    ap.add_argument("--limit", type=int, help="at most this many jobs of each fault kind")
    ap.add_argument("--out", type=Path, help="append the tables to this markdown file")
    ap.add_argument("--rows", type=Path, help="write every job's answer as JSON lines here")
    ap.add_argument("--title", default="aidai diagnose on the lab's pasted texts")
    ap.add_argument("--from-rows", type=Path, action="append", default=[],
                    help="tabulate the answers a run wrote with --rows (no diagnosis runs; --limit picks from them)")
    args = ap.parse_args()
    picked: dict[str, int] = defaultdict(int)
    rows = []
    for saved in args.from_rows:
        for line in saved.read_text().splitlines():
            row = json.loads(line)
            if not args.limit or picked[row["fault"]] < args.limit:
                picked[row["fault"]] += 1
                rows.append(row)
    with tempfile.TemporaryDirectory(prefix="aidai-lab-sim-") as tmp:
        for job in [] if args.from_rows else jobs_in(args.roots, parse_seeds(args.seeds)):
            truth = json.loads((job / "truth.json").read_text())
            failed = any(code != 0 for code in truth["exit"].values()) or truth["timed_out"]
            if not truth["fired"] or not failed or (args.limit and picked[truth["fault"]] >= args.limit):
                continue
            picked[truth["fault"]] += 1
            row = diagnose(job, args.host, Path(tmp))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    if args.rows:
        args.rows.write_text("".join(json.dumps(r) + "\n" for r in rows))
    user = [r for r in rows if r["user"]]
    owned = [r for r in rows if r["fault"] in USER_FAULTS | CONFIG_FAULTS]
    lines = [f"### {args.title}", "", f"`{' '.join(['python -m eval.lab.diagnose', *sys.argv[1:]])}`", "",
             *table(rows, "fault"), "", *table(rows, "launcher"), "",
             f"User-code faults blamed on hardware: {sum(r['hardware'] for r in user)} of {len(user)}. "
             f"User-code and configuration faults with the right leaf: {_rate([bool(r['leaf_ok']) for r in owned])}. "
             f"MAIN of the answer, all faults: {_rate([r['main_ok'] for r in rows])}.", ""]
    publish(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
