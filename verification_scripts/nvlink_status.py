#!/usr/bin/env python3
"""NVLink status: per-GPU link state and speed (`nvidia-smi nvlink -s`, else `dcgmi nvlink -s`) against the
profile's link count and speed, plus replay/recovery/CRC error counters (`nvidia-smi nvlink -e`).
"""

import re

import checklib
import checklib_gpu

GPU_RE = re.compile(r"^GPU (\d+): (.+?) \(UUID: ([^)]+)\)")
LINK_RE = re.compile(r"^\s*Link (\d+): (.+?)\s*$")
COUNTER_RE = re.compile(r"^\s*Link (\d+): (Replay|Recovery|CRC) Errors: (\d+)")
ALL_INACTIVE = "all links are inactive"
DCGM_GPU_RE = re.compile(r"^\s*gpuId (\d+):")
DCGM_STATES_RE = re.compile(r"^\s*([UDX_](?: [UDX_])*)\s*$")
CRC_WARN = 100  # DCGM fails an NVLink at 100 CRC errors per second; a snapshot this high is worth a look


def parse_smi(text):
    """{gpu index: list of link speeds in GB/s, None for <inactive>; [] when all links are inactive}."""
    gpus, current = {}, None
    for line in text.splitlines():
        match = GPU_RE.match(line)
        if match:
            current = int(match.group(1))
            gpus[current] = []
            continue
        if current is None:
            continue
        if ALL_INACTIVE in line:
            gpus[current] = "inactive"
            continue
        match = LINK_RE.match(line)
        if match and isinstance(gpus[current], list):
            value = match.group(2)
            gpus[current].append(None if "inactive" in value else checklib.to_float(value))
    return gpus


def parse_dcgmi(text):
    """dcgmi nvlink -s: {gpu id: ['U', 'D', ...]} (U up, D down, X disabled, _ not supported)."""
    gpus, current, in_gpus = {}, None, True
    for line in text.splitlines():
        if line.strip() == "GPUs:":
            in_gpus = True
            continue
        if line.strip().startswith("NvSwitches"):
            in_gpus = False
        match = DCGM_GPU_RE.match(line)
        if in_gpus and match:
            current = int(match.group(1))
            continue
        match = DCGM_STATES_RE.match(line)
        if in_gpus and match and current is not None:
            gpus[current] = match.group(1).split()
            current = None
    return gpus


def body(check):
    expected = check.expect("nvlink_links", int)
    speed = check.expect("nvlink_link_gbps")
    check.metrics.update({"expected_links": expected, "expected_link_gbps": speed})
    speed = speed or 0.0  # no expected speed: link speeds are not compared
    smi = check.run(["nvidia-smi", "nvlink", "-s"])
    links = parse_smi(smi.out)
    if links:
        judge(check, links, expected, speed)
        counters(check)
        return
    if smi.ok and not smi.out.strip():
        one_gpu(check, expected)
    dcgm = check.run(["dcgmi", "nvlink", "-s"])
    states = parse_dcgmi(dcgm.out)
    if not states:
        check.unknown("no NVLink status from nvidia-smi (%s) or dcgmi (%s)" % (
            checklib_gpu.nvsmi_error(smi) or smi.why(), dcgm.why() if not dcgm.ok else "no GPU rows"))
    check.metrics["source"] = "dcgmi"
    judge(check, {gpu: ([speed or 1.0] * s.count("U") + [None] * s.count("D")) if "U" in s or "D" in s else "inactive"
                  for gpu, s in states.items()}, expected, speed, states)


def one_gpu(check, expected):
    """`nvlink -s` printed nothing and exited 0. On a host with one GPU that is the answer, not a failed command:
    the GPU has no NVLink peer here (a 1-GPU VM, a PCIe card). With several GPUs it says nothing, so the caller goes
    on to dcgmi."""
    cmd = check.run(["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"])
    gpus = checklib.parse_query_csv(cmd.out, ["index", "pci.bus_id"]) if cmd.ok else []
    if len(gpus) != 1:
        return
    who = "GPU%s" % gpus[0]["index"]
    check.targets = [who]
    check.metrics.update({"gpus": 1, "active_links": {who: 0}})
    if expected:
        # a profile that still expects links on one GPU (a --profile override): the links are not visible, and
        # with no peer nothing can be said about them
        check.unknown("no NVLink peer on this one-GPU host (%s): nvidia-smi nvlink -s lists no link; the profile "
                      "expects %d links per GPU" % (who, expected))
    check.info("nvlink_no_peer", who, "one GPU on this host (%s): no NVLink peer, nothing to check" % who)
    check.finish("no NVLink peer on this one-GPU host (%s): nothing to check" % who)


def judge(check, links, expected, speed, dcgm_states=None):
    active = {}
    down = {}
    # without a SKU expectation the GPUs are measured against each other: the most links any GPU reports
    listed = max([len(s) for s in links.values() if s != "inactive"] or [0])
    width = expected if expected is not None else listed
    for gpu, state in sorted(links.items()):
        if state == "inactive":
            active[gpu], down[gpu] = 0, list(range(width))
            continue
        active[gpu] = sum(1 for s in state if s)
        down[gpu] = [k for k, s in enumerate(state) if not s]
    check.metrics.update({"active_links": {"GPU%d" % g: n for g, n in active.items()},
                          "inactive_links": {"GPU%d" % g: d for g, d in down.items() if d}})
    check.targets = ["GPU%d" % g for g in active]
    if expected == 0:
        if any(active.values()):
            check.info("nvlink_present", check.host, "NVLinks are active although the profile expects none")
        return
    if not any(active.values()):
        if expected is None:
            check.no_expectation("nvlink_links", seen="no GPU has an active NVLink (%d GPUs)" % len(active))
        if len(active) > 1:
            check.fail("nvlink_not_active", check.host, "no GPU has an active NVLink (0 of %d links on %d GPUs): "
                       "NVLink not enabled or not trained" % (expected, len(active)), ALL_INACTIVE)
            return
    if expected is None:
        expected = max(active.values())
        check.info("nvlink_links_from_peers", check.host, "no expectation for nvlink_links on this host: GPUs are "
                   "compared with the most active links any GPU has (%d)" % expected)
    for gpu, count in sorted(active.items()):
        who = "GPU%d" % gpu
        if links[gpu] == "inactive":
            check.fail("nvlink_all_inactive", who, "all NVLinks of %s are inactive" % who, ALL_INACTIVE)
        elif down[gpu]:
            check.fail("nvlink_inactive", who, "%s link(s) %s %s (%d/%d active)" % (
                who, ", ".join(str(k) for k in down[gpu]),
                "down" if dcgm_states else "inactive", count, expected))
        elif count < expected:
            check.fail("nvlink_missing", who, "%s reports %d NVLinks, expected %d" % (who, count, expected))
        slow = [s for s in links[gpu] if s and speed and s < speed * 0.95] if isinstance(links[gpu], list) else []
        if slow and not dcgm_states:
            check.warn("nvlink_slow", who, "%s has %d link(s) at %.3g GB/s, expected %.5g" % (
                who, len(slow), min(slow), speed))


def counters(check):
    cmd = check.run(["nvidia-smi", "nvlink", "-e"])
    totals, current = {}, None
    for line in cmd.out.splitlines():
        match = GPU_RE.match(line)
        if match:
            current = int(match.group(1))
            continue
        match = COUNTER_RE.match(line)
        if match and current is not None:
            key = (current, match.group(2))
            totals[key] = totals.get(key, 0) + int(match.group(3))
    if not totals:
        check.metrics["error_counters"] = None
        return
    check.metrics["error_counters"] = {"GPU%d" % g: {k.lower(): totals.get((g, k), 0)
                                                     for k in ("Replay", "Recovery", "CRC")}
                                       for g in sorted(set(g for g, _ in totals))}
    for (gpu, kind), value in sorted(totals.items()):
        if (kind == "Recovery" and value) or (kind in ("CRC", "Replay") and value >= CRC_WARN):
            check.warn("nvlink_errors", "GPU%d" % gpu, "GPU%d NVLink %s errors: %d" % (gpu, kind.lower(), value))


if __name__ == "__main__":
    checklib.main("nvlink_status", body)
