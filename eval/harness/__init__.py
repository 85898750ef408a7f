"""The diagnosis benchmark (AidAI §6, shaped like AIOpsLab): a problem is an incident record + the simulated
scenario its faults build + an evaluator (its label); a method diagnoses problems; metrics score the rows.

    problems.py   records → Problem (scenario + evaluator); a taxonomy with labels removed (unseen incidents)
    history.py    the historical DB of a run (seed / --history / leave-one-out), built in a fresh data dir
    methods.py    aidai (ours) and the four baselines (rcacopilot, tgd, did, cvd) over one Env
    runner.py     worker processes, per-incident timeout, a crash recorded as an error row
    metrics.py    micro/macro P/R/F1 at leaf, MAIN.SUB and MAIN; per category; pipeline shares; efficiency
    report.py     the Markdown tables and metrics.json

`aidai eval` (agent/cli/eval_cmd.py) is the face; `make bench-diagnosis` runs the dev set.
"""

from eval.harness.metrics import compute_metrics
from eval.harness.problems import Problem, load_problems, remove_labels
from eval.harness.runner import RunConfig, run_benchmark

__all__ = ["Problem", "RunConfig", "compute_metrics", "load_problems", "remove_labels", "run_benchmark"]
