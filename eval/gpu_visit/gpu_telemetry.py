"""Real GPU telemetry with injected anomalies (issue 36 item 4): Reveal's collector (agent/reveal/collect.py) every
0.5 s while a training loop runs on the GPU; anomalies start at set seconds and last set lengths, and their real
intervals (epoch seconds) go to OUTDIR/truth.json, as eval/lab/analog.py records its CPU analog. Needs python3 with
torch and pandas, nothing of aidai's installs; the GPU's settings are not touched.

    python3 eval/gpu_visit/gpu_telemetry.py OUTDIR DURATION [KIND:START:LENGTH ...]

KIND: second_process (GEMMs on the same GPU), all_cores_busy (a busy loop on every CPU), host_memory (30 % of the
host's memory filled and held)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

LOOP = r"""
import sys, time, torch
torch.manual_seed(0)
dev = "cuda" if torch.cuda.is_available() else "cpu"
width, batch = (4096, 8192) if dev == "cuda" else (256, 512)
model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(8)]).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
t0, n = time.time(), 0
while time.time() - t0 < float(sys.argv[1]):
    s = time.time()
    # part of the batch is made on the CPU, as a data loader would
    x = torch.cat([torch.randn(256, width).to(dev), torch.randn(batch - 256, width, device=dev)])
    with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
        loss = model(x).float().pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    if dev == "cuda": torch.cuda.synchronize()
    n += 1
    if n % 50 == 0: print(round(time.time() - t0, 1), n, round(1000 * (time.time() - s), 1), "ms", flush=True)
"""
SECOND = r"""
import sys, time, torch
dev = "cuda" if torch.cuda.is_available() else "cpu"
n, kind = (8192, torch.bfloat16) if dev == "cuda" else (256, torch.float32)
a = torch.randn(n, n, device=dev, dtype=kind)
if dev == "cuda": torch.cuda.synchronize()
print(time.time(), flush=True)
t = time.time()
while time.time() - t < float(sys.argv[1]):
    a @ a
    if dev == "cuda": torch.cuda.synchronize()
print(time.time(), flush=True)
"""
MEMORY = r"""
import sys, time
t = time.time()
chunks = [bytearray(b"\x01") * (1 << 30) for _ in range(int(sys.argv[1]))]  # filled: every page touched
print(t, flush=True)
time.sleep(float(sys.argv[2]))
print(time.time(), flush=True)
"""
COLLECT = r"""
import sys
from pathlib import Path
from agent.reveal import collect as c
r = c.collect(0.5, float(sys.argv[2]), use_gpu=True, use_perf=True)
c.write(r.frame, Path(sys.argv[1]))
print("samples", len(r.frame), "sources", r.sources, "missing", r.missing, flush=True)
print(f"collector overhead: {r.overhead_pct_of_core:.2f} % of one core, "
      f"{r.overhead_pct_of_host:.2f} % of the host's {r.cpus} CPUs", flush=True)
"""

KINDS = ("second_process", "all_cores_busy", "host_memory")


def main() -> None:
    out, duration = Path(sys.argv[1]), float(sys.argv[2])
    plan = [(k, float(s), float(length)) for k, s, length in (a.split(":") for a in sys.argv[3:])]
    unknown = {k for k, _, _ in plan} - set(KINDS)
    if unknown:
        sys.exit(f"unknown anomaly kind(s) {sorted(unknown)}; known: {', '.join(KINDS)}")
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}  # the repository: agent.reveal
    began = time.time()
    collector = subprocess.Popen([sys.executable, "-c", COLLECT, str(out / "telemetry.csv"), str(duration)],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    anomalies = []
    with (out / "loop.log").open("w") as log:
        loop = subprocess.Popen([sys.executable, "-c", LOOP, str(duration - 2)], stdout=log, stderr=subprocess.STDOUT)
        for kind, start, length in sorted(plan, key=lambda p: p[1]):
            time.sleep(max(0.0, began + start - time.time()))
            if kind == "second_process":
                run = subprocess.run([sys.executable, "-c", SECOND, str(length)], capture_output=True, text=True,
                                     timeout=length + 60)
                times = [float(v) for v in run.stdout.split()[:2]]
            elif kind == "all_cores_busy":
                t = time.time()
                hogs = [subprocess.Popen(["timeout", str(length), "sh", "-c", "while :; do :; done"])
                        for _ in range(os.cpu_count() or 1)]
                for hog in hogs:
                    hog.wait()
                times = [t, time.time()]
            else:  # host_memory
                gib = max(1, int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 * 0.3))
                run = subprocess.run([sys.executable, "-c", MEMORY, str(gib), str(length)], capture_output=True,
                                     text=True, timeout=length + 120)
                times = [float(v) for v in run.stdout.split()[:2]]
            anomalies.append({"kind": kind, "start": times[0], "end": times[1]})
            print(kind, times, flush=True)
        loop.wait(timeout=duration + 60)
    said, _ = collector.communicate(timeout=120)
    truth = {"began": began, "anomalies": anomalies, "collector": said.strip().splitlines()[-1] if said.strip() else "",
             "collector_said": said}
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    print(said)


if __name__ == "__main__":
    main()
