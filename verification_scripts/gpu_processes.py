#!/usr/bin/env python3
"""GPU processes: which processes hold which GPUs and how much memory, against the patterns of user-code
faults: every rank on GPU 0 (no set_device), every rank also holding memory on GPU 0 (checkpoint loaded
to cuda:0), a job process filling a GPU (batch too large), several MIG instances in one process's
CUDA_VISIBLE_DEVICES (CUDA uses only the first).
"""

import os
import re

import checklib
import checklib_gpu

GPU_FIELDS = ["index", "pci.bus_id", "uuid", "memory.total", "memory.used", "mig.mode.current"]
APP_FIELDS = ["gpu_bus_id", "gpu_uuid", "pid", "process_name", "used_gpu_memory"]
JOB_PROCESS_RE = re.compile(r"(^|/)(python[\d.]*|torchrun|deepspeed|accelerate|pt_main_thread)$")
FULL_WARN, FULL_FAIL = 0.95, 0.98
CHECKPOINT_MIB = 1024  # a stray CUDA context is ~500 MiB; more than this is data loaded onto GPU 0


def body(check):
    gpu_cmd = check.run(["nvidia-smi", "--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv,noheader,nounits"])
    gpus = [r for r in checklib.parse_query_csv(gpu_cmd.out, GPU_FIELDS) if checklib.to_int(r["index"]) is not None]
    if not gpus:
        check.unknown("no GPU list from nvidia-smi (%s)" % (checklib_gpu.nvsmi_error(gpu_cmd) or gpu_cmd.why()))
    app_cmd = check.run(["nvidia-smi", "--query-compute-apps=" + ",".join(APP_FIELDS), "--format=csv,noheader,nounits"])
    if not app_cmd.ok:
        check.unknown("no process list from nvidia-smi (%s)" % (checklib_gpu.nvsmi_error(app_cmd) or app_cmd.why()))
    index = {}
    for g in gpus:
        index[checklib_gpu.norm_bdf(g["pci.bus_id"])] = int(g["index"])
        index[g["uuid"].lower()] = int(g["index"])
    procs = []  # (gpu index, pid, name, MiB)
    for app in checklib.parse_query_csv(app_cmd.out, APP_FIELDS):
        gpu = index.get(checklib_gpu.norm_bdf(app["gpu_bus_id"]), index.get(app["gpu_uuid"].lower()))
        if gpu is not None:
            procs.append((gpu, app["pid"], app["process_name"], checklib.to_int(app["used_gpu_memory"]) or 0))
    per_gpu = {}
    for gpu, pid, name, mib in procs:
        per_gpu.setdefault(gpu, []).append((pid, name, mib))
    check.metrics.update({
        "process_count": len(set(p for _, p, _, _ in procs)),
        "processes_per_gpu": {"GPU%d" % g: len(per_gpu.get(g, [])) for g in sorted(int(r["index"]) for r in gpus)},
        "memory_used_mib": {"GPU%s" % r["index"]: checklib.to_int(r["memory.used"]) for r in gpus}})
    totals = {int(r["index"]): checklib.to_int(r["memory.total"]) for r in gpus}
    placement(check, per_gpu, len(gpus))
    memory(check, per_gpu, totals)
    mig(check, gpus)


def placement(check, per_gpu, count):
    on_zero = per_gpu.get(0, [])
    others = {g: p for g, p in per_gpu.items() if g != 0 and p}
    zero_pids = set(p for p, _, _ in on_zero)
    if count > 1 and len(zero_pids) >= 2 and not others:
        check.fail("device_assignment", "GPU0", "all %d job processes run on GPU0 while GPUs 1-%d are idle: the ranks "
                   "do not select their own device (torch.cuda.set_device(local_rank))" % (len(zero_pids), count - 1),
                   "GPU0 pids: %s" % ", ".join(sorted(zero_pids)))
        return
    ranks = set(p for procs in others.values() for p, _, _ in procs)
    extra = [(pid, mib) for pid, _, mib in on_zero if pid in ranks]
    if len(extra) >= 2 and len(extra) >= len(ranks) // 2:
        heavy = [e for e in extra if e[1] >= CHECKPOINT_MIB]
        text = "%d ranks running on other GPUs also hold memory on GPU0 (%d MiB in total)" % (
            len(extra), sum(m for _, m in extra))
        raw = "GPU0 extra pids: %s" % ", ".join("%s:%dMiB" % e for e in extra)
        if len(heavy) >= 2:
            check.fail("checkpoint_gpu0", "GPU0", text + ": a checkpoint or tensors loaded onto cuda:0 by every rank "
                       "(torch.load without map_location)", raw)
        else:
            check.warn("context_gpu0", "GPU0", text + ": stray CUDA contexts on GPU0 (set the device before CUDA "
                       "init)", raw)


def memory(check, per_gpu, totals):
    for gpu, procs in sorted(per_gpu.items()):
        total = totals.get(gpu)
        if not total:
            continue
        for pid, name, mib in procs:
            share = float(mib) / total
            if share < FULL_WARN:
                continue
            who = "GPU%d" % gpu
            text = "%s (pid %s) holds %d of %d MiB (%.0f%%) on %s" % (name, pid, mib, total, 100 * share, who)
            raw = "%s, %s, %s MiB" % (pid, name, mib)
            own = JOB_PROCESS_RE.search(name) and len(procs) == 1
            if own and share >= FULL_FAIL:
                check.fail("batch_oom", who, text + ": the job's own allocation fills the GPU (batch/model too large "
                           "for GPU memory)", raw)
            else:
                check.warn("batch_oom", who, text + ": GPU memory nearly exhausted", raw)


def mig(check, gpus):
    enabled = ["GPU%s" % r["index"] for r in gpus if checklib.to_bool(r["mig.mode.current"])]
    visible = check.params.get("cuda_visible_devices", os.environ.get("CUDA_VISIBLE_DEVICES"))
    check.metrics.update({"mig_enabled": enabled, "cuda_visible_devices": visible})
    if not enabled or not visible:
        return
    instances = [v.strip() for v in visible.split(",") if v.strip().startswith("MIG-")]
    if len(instances) >= 2:
        check.fail("mig_misuse", "CUDA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES lists %d MIG instances; a CUDA process "
                   "can use only one MIG instance (it sees only %s)" % (len(instances), instances[0]),
                   "CUDA_VISIBLE_DEVICES=%s" % visible)


if __name__ == "__main__":
    checklib.main("gpu_processes", body)
