"""A CPU analog of the held-back real H200 run (issue 36), on this machine: Reveal's host collector for 110 s at
0.5 s while a training-like loop runs (matrix products on one thread, about 22 ms a step when the machine is idle);
a second process computing on the same CPU from 25 s for 26 s (on the H200 it ran GEMMs on the same GPU), then every
core busy from 70 s for 20 s. Writes DIR/telemetry.csv, DIR/truth.json (the two intervals, epoch seconds) and
DIR/loop.log (the loop's step times). Only host-wide procfs here (no GPU): it shows what the collector and the
detector make of the same two anomalies, not what an H200's sensors would show.

    .venv/bin/python -m eval.lab.analog --out ../lab-t36/analog
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

LOOP = """
import sys, time, torch
torch.set_num_threads(1)
a, b = torch.randn(256, 256), torch.randn(256, 256)
t0, n = time.time(), 0
while time.time() - t0 < float(sys.argv[1]):
    s = time.time()
    for _ in range(40): torch.mm(a, b)
    n += 1
    if n % 100 == 0: print(round(time.time() - t0, 1), n, round(1000 * (time.time() - s), 1), "ms", flush=True)
"""
SECOND = """
import sys, time, torch
torch.set_num_threads(1)
a = torch.randn(1024, 1024)
t = time.time()
while time.time() - t < float(sys.argv[1]): torch.mm(a, a)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--duration", type=float, default=110.0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    # the collector in a process of its own, as `aidai reveal collect` runs (its cost is then its own)
    collector = subprocess.Popen([sys.executable, "-m", "agent.cli.main", "reveal", "collect", "--out",
                                  str(args.out / "telemetry.csv"), "--interval", "0.5", "--duration",
                                  str(args.duration), "--no-gpu", "--no-perf"], stdout=subprocess.PIPE, text=True)
    began = time.time()
    with (args.out / "loop.log").open("w") as log:
        loop = subprocess.Popen([sys.executable, "-c", LOOP, str(args.duration)], stdout=log)
        time.sleep(max(0.0, began + 25 - time.time()))
        # the second process starts computing once torch is imported: its interval is when it computes
        run = subprocess.run([sys.executable, "-c", "import time, torch; print(time.time(), flush=True)\n" + SECOND,
                              "26"], check=True, capture_output=True, text=True)
        second = [float(run.stdout.split()[0]), time.time()]
        time.sleep(max(0.0, began + 70 - time.time()))
        busy = [time.time()]
        hogs = [subprocess.Popen(["timeout", "20", "sh", "-c", "while :; do :; done"])
                for _ in range(os.cpu_count() or 1)]
        for hog in hogs:
            hog.wait()
        busy.append(time.time())
        loop.wait()
    said, _ = collector.communicate()
    truth = {"began": began, "anomalies": [{"kind": "second_process", "start": second[0], "end": second[1]},
                                           {"kind": "all_cores_busy", "start": busy[0], "end": busy[1]}],
             "collector": " ".join(said.split()).partition("collector overhead: ")[2]}
    (args.out / "truth.json").write_text(json.dumps(truth, indent=1))
    print(json.dumps(truth, indent=1))


if __name__ == "__main__":
    main()
