#!/usr/bin/env python3
"""container_runtime: GPU access through the container stack.

Inside a container: are /dev/nvidia* present, does the devices cgroup still allow them (lost
after a `systemctl daemon-reload` on cgroup v1 hosts: NVML "Unknown Error")? The toolkit's
version cannot be seen from there (INFO toolkit_version_unseen). On the host: is
the nvidia runtime configured in Docker (`docker info`, /etc/docker/daemon.json) and is the
NVIDIA Container Toolkit version (nvidia-ctk, nvidia-container-cli) known-bad
(params["known_bad"]["container_toolkit"])?
"""

import json
import re

import checklib
import checklib_gpu
import checklib_logs
from checklib import known_bad_entry, vkey

NVIDIA_MAJOR = "195"  # char major of /dev/nvidia0.. and /dev/nvidiactl


def in_container(check):
    if check.exists("/.dockerenv") or check.exists("/run/.containerenv"):
        return True
    return bool(re.search(r"docker|kubepods|containerd|libpod", check.read("/proc/1/cgroup") or ""))


def check_inside(check, unchecked):
    nodes = [n for n in check.listdir("/dev") if n.startswith("nvidia")]
    check.metrics["dev_nvidia"] = len(nodes)
    if not nodes:
        wanted = checklib_gpu.gpus_expected(check)
        if wanted:
            check.fail("runtime_not_configured", "container", "no /dev/nvidia* device nodes in the container: it "
                       "was started without the nvidia runtime (--gpus / --runtime=nvidia)")
        elif wanted is False:
            check.info("no_gpu", "container", "no /dev/nvidia* device nodes, and this host has no NVIDIA GPU")
        else:
            unchecked.append("GPU access (no /dev/nvidia* in the container, but no expectation for gpu_count on this "
                             "host and no NVIDIA GPU seen on the PCI bus)")
        return
    devices = check.read("/sys/fs/cgroup/devices/devices.list")
    if devices is not None:
        rules = [line.strip() for line in devices.splitlines() if line.strip()]
        allow_all = any(rule.startswith("a ") for rule in rules)
        nvidia = [rule for rule in rules if re.match(r"c %s:(\d+|\*) r" % NVIDIA_MAJOR, rule)]
        check.metrics["cgroup_nvidia_rules"] = len(nvidia)
        if not allow_all and not nvidia:
            check.fail("cgroup_device_access_lost", "devices cgroup", "the container's devices cgroup no longer "
                       "allows the NVIDIA devices (no 'c 195:*' rule) although /dev/nvidia* exist: typical after "
                       "`systemctl daemon-reload` on the host; restart the container",
                       "; ".join(rules[:6]))
    cmd = check.run(["nvidia-smi", "-L"], timeout=60)
    if "Failed to initialize NVML: Unknown Error" in cmd.text:
        check.fail("cgroup_device_access_lost", "NVML", "nvidia-smi inside the container: 'Failed to initialize "
                   "NVML: Unknown Error' while /dev/nvidia* exist (devices cgroup access lost)",
                   checklib.first_line(cmd.text))
    elif devices is None and not cmd.ok:
        unchecked.append("devices cgroup (no devices.list; %s)" % cmd.why())


def docker_runtimes(check):
    """Runtime names from `docker info`, else from /etc/docker/daemon.json; (names, source) or (None, why)."""
    cmd = check.run(["docker", "info"], timeout=60)
    if cmd.ok:
        for line in cmd.out.splitlines():
            if line.strip().startswith("Runtimes:"):
                return line.split(":", 1)[1].split(), "docker info"
    why = cmd.why()
    text = check.read("/etc/docker/daemon.json")
    if text is not None:
        try:
            config = json.loads(text or "{}")
        except ValueError:
            return None, "/etc/docker/daemon.json is not JSON"
        names = ["runc", *sorted((config.get("runtimes") or {}).keys())]
        return names, "/etc/docker/daemon.json"
    return None, why


def docker_gpu_errors(check):
    since, until = check.window(7 * 86400)
    # dockerd logs as SYSLOG_IDENTIFIER=dockerd under docker.service; search everything, it is one string
    cmd = check.run(["journalctl", "--no-pager", "--since", checklib_logs.stamp(since), "--until",
                     checklib_logs.stamp(until)], timeout=60)
    lines = cmd.out.splitlines() if cmd.ok else (check.read("/var/log/syslog") or "").splitlines()
    return [line for line in lines if "could not select device driver" in line]


def refusal(line):
    match = re.search(r"(could not select device driver.*?capabilities: \[\[[^]]*\]\])", line)
    return match.group(1).replace('\\"', '"') if match else line.strip()[-160:]


def check_host(check, unchecked):
    wanted = checklib_gpu.gpus_expected(check)
    docker = check.run(["docker", "--version"], timeout=20)
    if docker.missing:
        containerd = check.read("/etc/containerd/config.toml")
        if containerd is None:
            unchecked.append("the container runtime (neither docker nor containerd is configured on this host)")
        elif "nvidia" not in containerd and wanted:
            # Kubernetes nodes run GPU pods through containerd's nvidia runtime handler
            check.warn("runtime_not_configured", "containerd", "/etc/containerd/config.toml has no nvidia runtime")
        elif "nvidia" not in containerd:
            unchecked.append("containerd's runtimes (no nvidia runtime, but %s)" % no_gpu_reason(wanted))
        return
    names, source = docker_runtimes(check)
    hook = bool(checklib.which("nvidia-container-runtime-hook") or checklib.which("nvidia-ctk"))
    errors = docker_gpu_errors(check)
    if names is None:
        unchecked.append("docker runtimes (%s)" % source)
    else:
        check.metrics["docker_runtimes"] = names
        if "nvidia" not in names and not errors and not wanted:
            # a host without NVIDIA GPUs has no use for the nvidia runtime
            unchecked.append("Docker's runtimes (no nvidia runtime, but %s)" % no_gpu_reason(wanted))
        elif "nvidia" not in names:
            message = "Docker has no nvidia runtime (%s: %s)" % (source, " ".join(names))
            if errors or not hook:
                why = ("dockerd refused a GPU container: " + refusal(errors[-1]) if errors
                       else "no NVIDIA Container Toolkit installed")
                check.fail("runtime_not_configured", "docker", message + "; " + why
                           + "; run `nvidia-ctk runtime configure --runtime=docker` and restart docker",
                           errors[-1] if errors else "")
            else:
                check.warn("runtime_not_configured", "docker", message + " (only the legacy prestart hook is "
                           "available)")
    if errors and not any(f["id"] == "runtime_not_configured" for f in check.findings):
        check.fail("runtime_not_configured", "docker", "dockerd refused a GPU container: %s" % refusal(errors[-1]),
                   errors[-1])


def no_gpu_reason(wanted):
    if wanted is False:
        return "this host has no NVIDIA GPU"
    return "no expectation for gpu_count on this host and no NVIDIA GPU seen on the PCI bus"


def toolkit_versions(check):
    versions = {}
    cmd = check.run(["nvidia-ctk", "--version"], timeout=20)
    match = re.search(r"version\s+v?(\d+\.\d+\.\d+\S*)", cmd.out) if cmd.ok else None
    if match:
        versions["nvidia-ctk"] = match.group(1)
    cmd = check.run(["nvidia-container-cli", "--version"], timeout=20)
    if cmd.ok:
        for key in ("cli-version", "lib-version"):
            match = re.search(r"%s:\s*(\d+\.\d+\.\d+\S*)" % key, cmd.out)
            if match:
                versions["nvidia-container-cli " + key] = match.group(1)
    return versions


def check_toolkit(check, unchecked):
    versions = toolkit_versions(check)
    check.metrics["container_toolkit"] = versions
    if not versions:
        return
    distinct = sorted(set(vkey(v) for v in versions.values()))
    if len(distinct) > 1:
        check.fail("toolkit_version_mismatch", "nvidia-container-toolkit", "NVIDIA Container Toolkit components "
                   "are at different versions (%s): a partial upgrade breaks GPU containers"
                   % ", ".join("%s %s" % kv for kv in sorted(versions.items())))
    table = check.params.get("known_bad")
    if not isinstance(table, dict):
        unchecked.append("toolkit known-bad versions (no known_bad list in params)")
        return
    for name, version in sorted(versions.items()):
        entry = known_bad_entry(table.get("container_toolkit"), version)
        if entry:
            severity = str(entry.get("severity") or "FAIL").upper()
            check.finding("version_regression", severity if severity in ("FAIL", "WARN") else "FAIL",
                          "nvidia-container-toolkit %s" % version,
                          "NVIDIA Container Toolkit %s (%s) is a known-bad version: %s"
                          % (version, name, " ".join(str(entry.get("reason", "")).split())),
                          str(entry.get("source", "")))
            break


def body(check):
    unchecked = []
    inside = in_container(check)
    check.metrics["in_container"] = inside
    toolkit_unseen = inside and check.expect("gpu_count", int) != 0
    if inside:
        check_inside(check, unchecked)
        if toolkit_unseen:
            # the toolkit is a host package: from inside, its version (a known-bad release) cannot be seen; what the
            # container was given (its device nodes, its devices cgroup, NVML) was checked all the same
            check.info("toolkit_version_unseen", "nvidia-container-toolkit", "could not check the NVIDIA Container "
                       "Toolkit version (a host package, not visible from inside a container)")
    else:
        check_host(check, unchecked)
        check_toolkit(check, unchecked)
    bad = [f for f in check.findings if f["severity"] in ("FAIL", "WARN")]
    if unchecked and not bad:
        check.unknown("could not check: %s" % "; ".join(unchecked))
    for item in unchecked:
        check.info("not_checked", "host", "could not check %s" % item)
    if inside and not check.metrics.get("dev_nvidia"):
        check.finish("inside a container on a host without NVIDIA GPUs: no GPU access to configure")
    if inside:
        check.finish("inside a container: /dev/nvidia* present and allowed by the devices cgroup"
                     + ("; the toolkit version (a host package) not checked" if toolkit_unseen else ""))
    versions = sorted(set((check.metrics.get("container_toolkit") or {}).values()))
    toolkit = "toolkit %s not known-bad" % ", ".join(versions) if versions else "toolkit version not readable"
    check.finish("nvidia container runtime registered; " + toolkit)


if __name__ == "__main__":
    checklib.main("container_runtime", body)
