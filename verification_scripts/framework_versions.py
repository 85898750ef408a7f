#!/usr/bin/env python3
"""framework_versions: driver, CUDA, torch, NCCL and library versions, and whether they fit.

A child python (params["python"] or python3) reports torch/CUDA/cuDNN/NCCL versions, the compiled
arch list, GPU capabilities, pip package versions and the libnccl files mapped into the process.
The driver version comes from /proc/driver/nvidia/version, nvidia-smi or modinfo. Known-bad
versions come from params["known_bad"] (verification_scripts/known_bad.yaml).
Metrics torch, nccl and driver are compared across hosts by the runner.
"""

import json
import os
import re
import shutil
import tempfile

import checklib
from checklib import known_bad_entry, vkey

PACKAGES = ["torch", "deepspeed", "accelerate", "transformers", "megatron-core", "flash-attn", "apex", "vllm",
            "nvidia-nccl-cu12", "nvidia-nccl-cu11", "nvidia-nccl-cu13"]

PROBE = r'''
import json, os, sys, warnings
out = {"python": sys.version.split()[0], "packages": {}}
try:
    from importlib import metadata
    for name in sys.argv[1].split(","):
        try:
            out["packages"][name] = metadata.version(name)
        except Exception:
            pass
except ImportError:
    pass
try:
    import torch
    out["torch"] = str(torch.__version__)
    out["torch_cuda"] = torch.version.cuda
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        pass
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out["available"] = bool(torch.cuda.is_available())
            count = int(torch.cuda.device_count()) if out["available"] else 0
        except Exception as exc:
            out["available"], count = False, 0
            out["cuda_error"] = str(exc)
    out["warnings"] = [str(w.message) for w in caught]
    out["device_count"] = count
    if count:
        out["arch_list"] = list(torch.cuda.get_arch_list())
        out["capabilities"] = [list(torch.cuda.get_device_capability(i)) for i in range(count)]
        out["gpu_names"] = [torch.cuda.get_device_name(i) for i in range(count)]
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = list(v[:3]) if isinstance(v, tuple) else int(v)
    except Exception as exc:
        out["nccl_error"] = str(exc)
except BaseException as exc:
    out["import_error"] = "%s: %s" % (type(exc).__name__, exc)
try:
    root = os.environ.get("AIDAI_SYSROOT") or "/"
    with open(os.path.join(root, "proc/self/maps")) as handle:
        out["nccl_maps"] = sorted({l.split()[-1] for l in handle if "libnccl" in l.split()[-1]})
except (OSError, IndexError):
    pass
print(json.dumps(out))
'''

# minimum Linux driver for a CUDA runtime (CUDA toolkit release notes; 11.x/12.x use minor-version compatibility)
MIN_DRIVER = [((13, 0), "580.65.06"), ((12, 0), "525.60.13"), ((11, 0), "450.80.02"), ((10, 2), "440.33"),
              ((10, 1), "418.39"), ((10, 0), "410.48"), ((9, 2), "396.26"), ((9, 1), "390.46"), ((9, 0), "384.81"),
              ((8, 0), "375.26")]
# newest CUDA a driver branch supports (the nvidia-smi "CUDA Version")
DRIVER_CUDA = [(580, "13.0"), (575, "12.9"), (570, "12.8"), (565, "12.7"), (560, "12.6"), (555, "12.5"),
               (550, "12.4"), (545, "12.3"), (535, "12.2"), (530, "12.1"), (525, "12.0"), (520, "11.8"),
               (515, "11.7"), (510, "11.6"), (495, "11.5"), (470, "11.4"), (465, "11.3"), (460, "11.2"),
               (455, "11.1"), (450, "11.0"), (440, "10.2"), (418, "10.1"), (410, "10.0"), (396, "9.2"),
               (390, "9.1"), (384, "9.0")]


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


def min_driver_for(cuda):
    key = vkey(cuda)[:2]
    for ver, driver in MIN_DRIVER:
        if key >= ver:
            return driver
    return None


def driver_max_cuda(driver):
    branch = (vkey(driver) or (0,))[0]
    for floor, cuda in DRIVER_CUDA:
        if branch >= floor:
            return cuda
    return None


def driver_version(check):
    text = check.read("/proc/driver/nvidia/version") or ""
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    if match:
        return match.group(1), "/proc/driver/nvidia/version"
    cmd = check.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], timeout=60)
    if cmd.ok:
        for line in cmd.out.splitlines():
            if re.match(r"^\d+\.\d+", line.strip()):
                return line.strip(), "nvidia-smi"
    cmd = check.run(["modinfo", "-F", "version", "nvidia"], timeout=20)
    if cmd.ok and re.match(r"^\d+\.\d+", cmd.out.strip()):
        return cmd.out.strip(), "modinfo"
    return None, None


def nccl_string(value):
    if isinstance(value, list):
        return ".".join(str(v) for v in value)
    if isinstance(value, int):
        # NCCL_VERSION_CODE: major*1000+minor*100+patch before 2.9, major*10000+minor*100+patch since
        if value >= 20900:
            return "%d.%d.%d" % (value // 10000, value // 100 % 100, value % 100)
        return "%d.%d.%d" % (value // 1000, value // 100 % 10, value % 100)
    return None


def in_container(check):
    if check.exists("/.dockerenv") or check.exists("/run/.containerenv"):
        return True
    return bool(re.search(r"docker|kubepods|containerd|libpod", check.read("/proc/1/cgroup") or ""))


def container_cuda(check):
    """CUDA version of the image's user space: CUDA_VERSION env, version.json, version.txt."""
    if os.environ.get("CUDA_VERSION"):
        return os.environ["CUDA_VERSION"], "CUDA_VERSION"
    text = check.read("/usr/local/cuda/version.json")
    if text:
        try:
            return json.loads(text)["cuda"]["version"], "/usr/local/cuda/version.json"
        except (ValueError, KeyError, TypeError):
            pass
    match = re.search(r"CUDA Version (\d+\.\d+(?:\.\d+)?)", check.read("/usr/local/cuda/version.txt") or "")
    return (match.group(1), "/usr/local/cuda/version.txt") if match else (None, None)


def nvcc_version(check):
    cmd = check.run(["nvcc", "--version"], timeout=20)
    match = re.search(r"release (\d+\.\d+)", cmd.out) if cmd.ok else None
    return match.group(1) if match else None


def check_nccl_conflict(check, probe, nccl, packages):
    error = probe.get("import_error") or probe.get("nccl_error") or ""
    symbol = re.search(r"undefined symbol: (nccl\w+)", error)
    if symbol:
        check.fail("nccl_library_conflict", "libnccl", "torch cannot load: a different libnccl (older than the one "
                   "torch was built with) shadows torch's bundled NCCL; missing symbol %s" % symbol.group(1),
                   checklib.first_line(error))
    maps = probe.get("nccl_maps") or []
    if len(maps) > 1:
        check.fail("nccl_library_conflict", "libnccl", "%d NCCL libraries are loaded in one process: %s"
                   % (len(maps), ", ".join(maps)), " ".join(maps))
    wheel = packages.get("nvidia-nccl-cu12") or packages.get("nvidia-nccl-cu11") or packages.get("nvidia-nccl-cu13")
    if nccl and wheel and vkey(wheel)[:3] != vkey(nccl)[:3]:
        check.fail("nccl_library_conflict", "libnccl", "torch runs NCCL %s but its nvidia-nccl wheel is %s: another "
                   "libnccl on LD_LIBRARY_PATH shadows the bundled one" % (nccl, wheel))
    for directory in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":")):
        for name in check.listdir(directory):
            match = re.match(r"libnccl\.so\.(\d+\.\d+\.\d+)$", name)
            if match and (not nccl or vkey(match.group(1)) != vkey(nccl)) and (wheel or not nccl):
                check.fail("nccl_library_conflict", os.path.join(directory, name),
                           "LD_LIBRARY_PATH has NCCL %s (%s) while torch bundles NCCL %s"
                           % (match.group(1), os.path.join(directory, name), wheel or nccl),
                           "LD_LIBRARY_PATH=%s" % os.environ.get("LD_LIBRARY_PATH"))


def check_driver(check, probe, driver, unchecked):
    cuda = probe.get("torch_cuda")
    if not cuda:
        return
    need = min_driver_for(cuda)
    if driver and need and vkey(driver) < vkey(need):
        check.fail("driver_too_old", "driver %s" % driver, "driver %s is older than CUDA %s (torch %s) needs: >= %s "
                   "(\"CUDA driver version is insufficient for CUDA runtime version\")"
                   % (driver, cuda, probe.get("torch"), need), "torch.version.cuda=%s driver=%s" % (cuda, driver))
    elif not driver and not probe.get("available"):
        unchecked.append("driver vs CUDA runtime (driver version unknown)")


def check_arch(check, probe):
    arch = probe.get("arch_list") or []
    if not arch:
        return
    sass = [vkey(a.split("_", 1)[1]) for a in arch if a.startswith("sm_")]
    ptx = [vkey(a.split("_", 1)[1]) for a in arch if a.startswith("compute_")]
    names = probe.get("gpu_names") or []
    unsupported = {}
    for i, cap in enumerate(probe.get("capabilities") or []):
        want = int(cap[0]) * 10 + int(cap[1])
        # SASS runs on the same major with an equal or higher minor; PTX JIT-compiles forward
        ok = any(s and s[0] // 10 == int(cap[0]) and s[0] <= want for s in sass)
        ok = ok or any(p and p[0] <= want for p in ptx)
        if not ok:
            unsupported.setdefault((want, names[i] if i < len(names) else ""), []).append(i)
    for (want, name), gpus in sorted(unsupported.items()):
        entity = ",".join("GPU%d" % i for i in gpus)
        check.fail("arch_unsupported", entity, "%s %s: compute capability sm_%d is not in torch's arch list %s and "
                   "there is no PTX fallback (\"no kernel image is available for execution on the device\")"
                   % (entity, name, want, " ".join(arch)), "arch_list=%s" % arch)


def check_container_cuda(check, facts):
    driver = facts["driver"]
    if not driver:
        return
    top = driver_max_cuda(driver)
    if facts["in_container"]:
        compat = [n for n in check.listdir("/usr/local/cuda/compat") if re.match(r"libcuda\.so\.\d+\.", n)]
        for name in compat:
            version = name[len("libcuda.so."):]
            used = "/usr/local/cuda/compat" in os.environ.get("LD_LIBRARY_PATH", "")
            if vkey(version) != vkey(driver) and used:
                check.fail("host_vm_cuda_mismatch", "container", "container loads the forward-compatibility "
                           "libcuda %s while the host/VM kernel driver is %s: align the container's CUDA with the "
                           "VM driver" % (version, driver), "/usr/local/cuda/compat/%s" % name)
        cuda, source = facts["container_cuda"]
        if cuda and top and vkey(cuda)[:2] > vkey(top):
            same_major = vkey(cuda)[0] == vkey(top)[0]
            message = ("container CUDA %s (%s) is newer than driver %s supports (CUDA %s)"
                       % (cuda, source, driver, top))
            if same_major:
                check.warn("host_vm_cuda_mismatch", "container", message + ": runs only via minor-version "
                           "compatibility (PTX JIT and newer APIs fail)")
            else:
                check.fail("host_vm_cuda_mismatch", "container", message)
    elif facts["nvcc"] and top and vkey(facts["nvcc"])[:1] > vkey(top)[:1]:
        check.warn("toolkit_newer_than_driver", "nvcc", "CUDA toolkit %s (nvcc) needs a newer driver than %s "
                   "(CUDA %s)" % (facts["nvcc"], driver, top))


# the versions whose bugs are leaves of their own (NCCL regression, DeepSpeed/Accelerate bug, driver bug)
UNLISTED = ("nccl", "deepspeed", "accelerate", "driver")


def check_known_bad(check, versions, matcher, unchecked):
    table = check.params.get("known_bad")
    if not isinstance(table, dict):
        unchecked.append("known-bad versions (no known_bad list in params)")
        return
    labels = {"nccl": "NCCL", "deepspeed": "DeepSpeed", "accelerate": "Accelerate", "driver": "driver",
              "driver_gsp": "driver (GSP firmware)"}
    for key, version in versions.items():
        if not version:
            continue
        entry = matcher(table.get(key), version)
        if entry is None:
            # the list's silence clears nothing: a release nobody has catalogued may still carry the bug
            if key in UNLISTED:
                check.info("unlisted_%s" % key, "%s %s" % (labels[key], version),
                           "%s %s is not in the known-bad list: a bug of this release is neither confirmed nor "
                           "ruled out (search its release notes and issues for the error)" % (labels[key], version))
            continue
        severity = str(entry.get("severity") or "FAIL").upper()
        check.finding("known_bad_%s" % key, severity if severity in ("FAIL", "WARN") else "FAIL",
                      "%s %s" % (labels[key], version),
                      "%s %s is a known-bad version: %s" % (labels[key], version,
                                                            " ".join(str(entry.get("reason", "")).split())),
                      str(entry.get("source", "")))


def body(check):
    python = check.params.get("python") or "python3"
    cmd = run_probe(check, python, PROBE, [",".join(PACKAGES)], float(check.params.get("probe_timeout_s", 90)))
    if cmd.missing:
        check.unknown("%s not found: cannot inspect the Python framework" % python)
    probe = None
    for line in cmd.out.splitlines():
        if line.strip().startswith("{"):
            try:
                probe = json.loads(line)
            except ValueError:
                probe = None
    if probe is None:
        check.unknown("version probe gave no result (%s)" % cmd.why())
    driver, driver_src = driver_version(check)
    facts = {"probe": probe, "driver": driver, "driver_source": driver_src, "nvcc": nvcc_version(check),
             "in_container": in_container(check), "container_cuda": container_cuda(check)}
    packages = probe.get("packages") or {}
    nccl = nccl_string(probe.get("nccl"))
    check.metrics.update({
        "torch": probe.get("torch") or packages.get("torch"), "torch_cuda": probe.get("torch_cuda"),
        "nccl": nccl, "driver": driver, "driver_max_cuda": driver_max_cuda(driver) if driver else None,
        "cudnn": probe.get("cudnn"), "arch_list": probe.get("arch_list"), "nvcc": facts["nvcc"],
        "python": probe.get("python"), "in_container": facts["in_container"],
        "container_cuda": facts["container_cuda"][0],
        "deepspeed": packages.get("deepspeed"), "accelerate": packages.get("accelerate"),
        "transformers": packages.get("transformers"),
    })
    unchecked = []
    check_nccl_conflict(check, probe, nccl, packages)
    check_driver(check, probe, driver, unchecked)
    check_arch(check, probe)
    check_container_cuda(check, facts)
    check_known_bad(check, {"nccl": nccl, "deepspeed": packages.get("deepspeed"),
                            "accelerate": packages.get("accelerate"), "driver": driver,
                            "driver_gsp": driver}, known_bad_entry, unchecked)
    if probe.get("import_error") and not any(f["severity"] == "FAIL" for f in check.findings):
        unchecked.append("torch (%s)" % probe["import_error"][:200])
    bad = [f for f in check.findings if f["severity"] in ("FAIL", "WARN")]
    if unchecked and not bad:
        check.unknown("could not check: %s" % "; ".join(unchecked))
    for item in unchecked:
        check.info("not_checked", "host", "could not check %s" % item)
    check.finish("torch %s (CUDA %s), NCCL %s, driver %s: compatible, none known-bad"
                 % (check.metrics["torch"], check.metrics["torch_cuda"], nccl, driver))


if __name__ == "__main__":
    checklib.main("framework_versions", body)
