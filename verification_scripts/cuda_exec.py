#!/usr/bin/env python3
"""cuda_exec: can CUDA run on every GPU?

Runs a torch probe in a child python (params["python"] or python3): per device set_device, a
4 MiB allocation, a tiny kernel and a synchronize; reports the exact CUDA error text per GPU.
The probe prints one JSON line per step, so a hang is pinned to the GPU it started on.
"""

import json
import os
import shutil
import tempfile

import checklib
import checklib_gpu

PROBE = r'''
import json, sys, warnings

def emit(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()

try:
    import torch
except BaseException as exc:
    emit(kind="import_error", error="%s: %s" % (type(exc).__name__, exc))
    sys.exit(0)
emit(kind="imported")
info = {"torch": str(getattr(torch, "__version__", "")),
        "cuda": getattr(getattr(torch, "version", None), "cuda", None)}
errors = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        available = bool(torch.cuda.is_available())
        count = int(torch.cuda.device_count())
    except Exception as exc:
        available, count = False, 0
        errors.append(str(exc))
if count == 0 and info["cuda"]:
    try:
        torch.cuda.init()
        torch.ones(1, device="cuda")
    except Exception as exc:
        errors.append(str(exc))
emit(kind="init", available=available, device_count=count, errors=errors,
     warnings=[str(w.message) for w in caught], **info)
for i in range(count):
    emit(kind="start", gpu=i)
    name = ""
    try:
        name = torch.cuda.get_device_name(i)
        torch.cuda.set_device(i)
        x = torch.ones(1 << 20, device="cuda:%d" % i)
        total = float((x * 2).sum().item())
        torch.cuda.synchronize(i)
        ok = total == float(2 << 20)
        emit(kind="gpu", gpu=i, name=name, ok=ok, error="" if ok else "wrong result %r" % total)
    except Exception as exc:
        emit(kind="gpu", gpu=i, name=name, ok=False, error=str(exc))
'''

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


def first_error_line(text):
    for line in (text or "").splitlines():
        line = line.strip()
        if line and not line.startswith(("CUDA kernel errors might", "For debugging consider", "Compile with")):
            return line[:300]
    return ""


def parse_probe(out):
    events = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


def report_init(check, init):
    """No device to test: the init error (or warnings) is the finding."""
    texts = [t for t in (init.get("errors") or []) if t] + [
        w for w in (init.get("warnings") or []) if "CUDA" in w or "driver" in w.lower()]
    if not texts:
        check.fail("no_device", "host", "torch sees no CUDA device (is_available() is False) and gave no reason")
        return
    text = texts[0]
    kind, severity = checklib_gpu.classify_cuda_error(text)
    line = first_error_line(text)
    check.finding(kind, severity, "host", "CUDA initialisation failed: %s" % line, line)


def body(check):
    python = check.params.get("python") or "python3"
    timeout = float(check.params.get("probe_timeout_s", 90))
    env = {"CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID")}
    cmd = run_probe(check, python, PROBE, [], timeout, env)
    if cmd.missing:
        check.unknown("%s not found: cannot run the torch probe" % python)
    events = parse_probe(cmd.out)
    if events and events[0].get("kind") == "import_error":
        check.unknown("torch cannot be imported by %s: %s" % (python, events[0].get("error", "")[:300]))
    init = next((e for e in events if e.get("kind") == "init"), None)
    if init is None and cmd.timed_out and any(e.get("kind") == "imported" for e in events):
        check.fail("init_hang", "host", "CUDA initialisation hung (no answer from torch.cuda within %ds)" % timeout)
        check.finish()
    if init is None:
        check.unknown("torch probe gave no result (%s)" % (cmd.why() if not cmd.ok else "no JSON output"))
    check.metrics.update({"torch": init.get("torch"), "cuda": init.get("cuda"),
                          "device_count": init.get("device_count", 0)})
    if not init.get("cuda"):
        check.unknown("torch %s is a CPU-only build (torch.version.cuda is None)" % init.get("torch"))
    count = int(init.get("device_count") or 0)
    if count == 0:
        check.metrics["ok"] = 0
        wanted = checklib_gpu.gpus_expected(check)
        if not wanted:
            # "no CUDA device" is only a fault on a host that should have one
            texts = (init.get("errors") or []) + (init.get("warnings") or [])
            check.unknown("torch sees no CUDA device%s; %s" % (
                " (%s)" % first_error_line(texts[0]) if texts else "",
                "this host has no NVIDIA GPU" if wanted is False else
                "no expectation for gpu_count on this host and no NVIDIA GPU seen on the PCI bus"))
        report_init(check, init)
        check.finish()
    results = {e["gpu"]: e for e in events if e.get("kind") == "gpu"}
    started = [e["gpu"] for e in events if e.get("kind") == "start"]
    ok = 0
    for i in range(count):
        entity = "GPU%d" % i
        check.targets.append(entity)
        result = results.get(i)
        if result is None:
            if i in started and cmd.timed_out:
                check.fail("probe_hang", entity, "CUDA probe hung on GPU %d (no result within %ds)" % (i, timeout))
            elif i in started:
                check.fail("probe_crash", entity, "CUDA probe died on GPU %d: %s" % (i, cmd.why()),
                           checklib.first_line(cmd.err))
            continue
        if result.get("ok"):
            ok += 1
            continue
        line = first_error_line(result.get("error", ""))
        kind, severity = checklib_gpu.classify_cuda_error(line)
        check.finding(kind, severity, entity, "%s: %s" % (entity, line), line)
    # the GPU still fails with an ECC error, but the error may be weeks old: dated by its Xid lines
    checklib_gpu.date_gpu_findings(check, {"ecc_uncorrectable": checklib_gpu.MEMORY_XIDS})
    check.metrics["ok"] = ok
    check.metrics["failed_gpus"] = [i for i in range(count) if not (results.get(i) or {}).get("ok")]
    expected = check.expect("gpu_count", int)
    if expected and count < expected and not os.environ.get("CUDA_VISIBLE_DEVICES"):
        check.warn("device_count", "host", "CUDA sees %d GPUs, the %s profile expects %d"
                   % (count, check.profile.get("name") or "host", expected))
    check.finish("all %d GPUs ran a CUDA kernel (torch %s, CUDA %s)" % (count, init.get("torch"), init.get("cuda")))


if __name__ == "__main__":
    checklib.main("cuda_exec", body)
