#!/usr/bin/env python3
"""gpu_exec: BF16 GEMM on every GPU, checked for silent data corruption and stragglers.

A child python (params["python"] or python3) runs the same seeded GEMM on each GPU: one 256x256
block of the product is compared with an FP64 reference computed on the CPU, and the checksum
of the whole product is compared across GPUs (identical inputs and identical GPUs give identical
results). TFLOPS are timed with CUDA events. Needs idle GPUs (tier: active).
"""

import json
import os
import shutil
import tempfile

import checklib
import checklib_gpu

PROBE = r'''
import json, sys

def emit(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()

try:
    import torch
except BaseException as exc:
    emit(kind="import_error", error="%s: %s" % (type(exc).__name__, exc))
    sys.exit(0)
n, iters, k = int(sys.argv[1]), int(sys.argv[2]), 256
try:
    count = torch.cuda.device_count()
except Exception as exc:
    emit(kind="init", device_count=0, error=str(exc), torch=str(torch.__version__))
    sys.exit(0)
emit(kind="init", device_count=count, torch=str(torch.__version__), cuda=torch.version.cuda)
gen = torch.Generator().manual_seed(20240514)
a_cpu = torch.randn(n, n, generator=gen)
b_cpu = torch.randn(n, n, generator=gen)
ref = a_cpu[:k, :].double() @ b_cpu[:, :k].double()
ref_scale = float(ref.abs().max().item())
for i in range(count):
    emit(kind="start", gpu=i)
    try:
        torch.cuda.set_device(i)
        dev = torch.device("cuda", i)
        a = a_cpu.to(dev, dtype=torch.bfloat16)
        b = b_cpu.to(dev, dtype=torch.bfloat16)
        c = torch.matmul(a, b)
        torch.cuda.synchronize(i)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            c = torch.matmul(a, b)
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        err = float((c[:k, :k].double().cpu() - ref).abs().max().item())
        full = c.double()
        emit(kind="gpu", gpu=i, name=torch.cuda.get_device_name(i), ms=ms,
             tflops=2.0 * n ** 3 * iters / (ms / 1000.0) / 1e12, max_abs_err=err, ref_scale=ref_scale,
             checksum=float(full.sum().item()), abs_sum=float(full.abs().sum().item()))
        del a, b, c, full
    except Exception as exc:
        emit(kind="gpu", gpu=i, error=str(exc))
'''

REL_TOLERANCE = 0.02  # bf16 inputs and output round to ~0.4 %; corruption is far larger
CHECKSUM_TOLERANCE = 1e-5  # identical GPUs give bit-identical GEMMs; allow for algorithm choice
STRAGGLER_RATIO = 0.9


def run_probe(check, python, source, args, timeout, env=None):
    """Run the probe from a private temp dir: a short command line in the evidence, and nothing else on
    the probe's sys.path[0] that could shadow torch."""
    folder = tempfile.mkdtemp(prefix="aidai-probe-")
    path = os.path.join(folder, "%s_probe.py" % check.name)
    try:
        with open(path, "w") as handle:
            handle.write(source)
        return check.run([python, path, *args], timeout=timeout, env=env)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def parse_events(text):
    events = []
    for line in text.splitlines():
        if line.strip().startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


def judge_correctness(check, results):
    for i, r in sorted(results.items()):
        scale = r.get("ref_scale") or 0.0
        rel = r["max_abs_err"] / scale if scale else float("inf")
        if rel > REL_TOLERANCE:
            check.fail("sdc_mismatch", "GPU%d" % i, "GPU%d: BF16 GEMM result differs from the FP64 reference "
                       "(max error %.3g of %.3g, %.1f%%): silent data corruption" % (i, r["max_abs_err"], scale,
                                                                                 100 * rel))
    sums = [r["checksum"] for r in results.values()]
    if len(sums) >= 3:
        mid = median(sums)
        for i, r in sorted(results.items()):
            denom = r.get("abs_sum") or 1.0
            if abs(r["checksum"] - mid) / denom > CHECKSUM_TOLERANCE:
                check.fail("sdc_checksum", "GPU%d" % i, "GPU%d: GEMM checksum %.6g differs from the other GPUs "
                           "(median %.6g): silent data corruption" % (i, r["checksum"], mid))


def judge_speed(check, results):
    # a tolerance between a GPU and its peers, not a SKU expectation: kept when the profile has none
    ratio = check.expect("straggler_ratio") or STRAGGLER_RATIO
    floor = check.expect("gemm_tflops") or 0.0
    tflops = {i: r["tflops"] for i, r in results.items()}
    check.metrics["tflops"] = {str(i): round(t, 1) for i, t in sorted(tflops.items())}
    mid = median(list(tflops.values()))
    check.metrics["tflops_median"] = round(mid, 1)
    for i, value in sorted(tflops.items()):
        if len(tflops) >= 2 and value < ratio * mid:
            check.fail("straggler", "GPU%d" % i, "GPU%d: %.0f TFLOPS BF16, %.0f%% of the node median %.0f "
                       "(threshold %.0f%%)" % (i, value, 100 * value / mid, mid, 100 * ratio))
        elif floor and value < floor:
            check.warn("slow_gpu", "GPU%d" % i, "GPU%d: %.0f TFLOPS BF16, below the %s profile's %.0f"
                       % (i, value, check.profile.get("name") or "host", floor))


def body(check):
    python = check.params.get("python") or "python3"
    n = int(check.params.get("gemm_n", 8192))
    iters = int(check.params.get("iters", 50))
    timeout = float(check.params.get("probe_timeout_s", 240))
    cmd = run_probe(check, python, PROBE, [str(n), str(iters)], timeout)
    if cmd.missing:
        check.unknown("%s not found: cannot run the GEMM probe" % python)
    events = parse_events(cmd.out)
    if events and events[0].get("kind") == "import_error":
        check.unknown("torch cannot be imported by %s: %s" % (python, events[0].get("error", "")[:300]))
    init = next((e for e in events if e.get("kind") == "init"), None)
    if init is None:
        check.unknown("GEMM probe gave no result (%s)" % (cmd.why() if not cmd.ok else "no JSON output"))
    count = int(init.get("device_count") or 0)
    check.metrics.update({"device_count": count, "torch": init.get("torch"), "gemm_n": n, "iters": iters})
    if count == 0:
        check.unknown("no CUDA device to test: %s" % (init.get("error") or "device_count() is 0"))
    results, errors = {}, {}
    for e in events:
        if e.get("kind") == "gpu":
            (errors if e.get("error") else results)[e["gpu"]] = e
    started = [e["gpu"] for e in events if e.get("kind") == "start"]
    busy, setup = [], []
    for i in range(count):
        check.targets.append("GPU%d" % i)
        if i in errors:
            line = checklib.first_line(errors[i]["error"])
            kind = checklib_gpu.classify_cuda_error(line)[0]
            if "out of memory" in line:
                # another process holds the GPU: the test could not run, the GPU is not at fault
                busy.append(i)
                check.info("gpu_busy", "GPU%d" % i, "GPU%d: not tested, its memory is in use: %s" % (i, line), line)
            elif kind in checklib_gpu.CUDA_SETUP_ERRORS:
                # the stack cannot run any kernel here (arch not compiled in, driver too old): not the GPU's fault
                setup.append(i)
                check.info("probe_" + kind, "GPU%d" % i, "GPU%d: not tested, the CUDA stack cannot run kernels: %s"
                           % (i, line), line)
            elif kind == "ecc_uncorrectable":
                # the memory's failure, as the CUDA probe reports it; not a compute fault of the GPU
                check.fail("ecc_uncorrectable", "GPU%d" % i, "GPU%d: GEMM probe failed: %s" % (i, line), line)
            else:
                check.fail("gemm_error", "GPU%d" % i, "GPU%d: GEMM probe failed: %s" % (i, line), line)
        elif i not in results and i in started:
            check.fail("gemm_hang", "GPU%d" % i, "GPU%d: GEMM probe did not finish (%s)" % (i, cmd.why()))
    # the GPU still fails with an ECC error, but the error may be weeks old: dated by its Xid lines
    checklib_gpu.date_gpu_findings(check, {"ecc_uncorrectable": checklib_gpu.MEMORY_XIDS})
    missing = [i for i in range(count) if i not in results and i not in errors and i not in started]
    if missing and not check.findings:
        check.unknown("probe stopped before GPUs %s (%s)" % (missing, cmd.why()))
    if missing:
        check.info("not_tested", ",".join("GPU%d" % i for i in missing), "not tested after the probe stopped")
    if busy and not results and not any(f["severity"] == "FAIL" for f in check.findings):
        check.unknown("GPUs %s are busy (out of memory): the GEMM test needs idle GPUs" % busy)
    if setup and not results and not any(f["severity"] == "FAIL" for f in check.findings):
        check.unknown("the GEMM probe could not run on GPUs %s: %s (a software set-up problem, which says nothing "
                      "about the GPUs' health)" % (setup, checklib.first_line(errors[setup[0]]["error"])))
    if results:
        judge_correctness(check, results)
        judge_speed(check, results)
    check.metrics["ok"] = len(results)
    check.finish("%d GPUs: GEMM results match the reference, %s TFLOPS median"
                 % (len(results), check.metrics.get("tflops_median")))


if __name__ == "__main__":
    checklib.main("gpu_exec", body)
