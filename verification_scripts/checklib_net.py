"""RDMA port discovery and nccl-tests running and judging, shared by the network and NCCL checks. Shipped with
checklib.py; python3 stdlib only (>= 3.8)."""

import os
import re

from checklib import to_float, to_int, which

# ---- RDMA ports (shared by the network checks) ------------------------------------------------------
IB_CLASS = "/sys/class/infiniband"


def sysfs_enum(text):
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp' (sysfs port state files)."""
    value = (text or "").strip()
    return value.split(":", 1)[1].strip() if ":" in value else value


def rdma_ports(check):
    """Every port under /sys/class/infiniband as a dict: dev, port, state, phys_state, rate_gbps,
    link_layer, hca_type, fw_ver, netdevs. Empty when the kernel shows no RDMA device."""
    ports = []
    for dev in check.listdir(IB_CLASS):
        base = IB_CLASS + "/" + dev
        for port in check.listdir(base + "/ports"):
            path = "%s/ports/%s" % (base, port)
            ports.append({
                "dev": dev,
                "port": to_int(port) or 1,
                "state": sysfs_enum(check.read(path + "/state")).upper(),
                "phys_state": sysfs_enum(check.read(path + "/phys_state")),
                "rate_gbps": to_float(check.read(path + "/rate")),
                "link_layer": (check.read(path + "/link_layer") or "").strip(),
                "hca_type": (check.read(base + "/hca_type") or "").strip(),
                "fw_ver": (check.read(base + "/fw_ver") or "").strip(),
                "netdevs": check.listdir(base + "/device/net"),
            })
    return ports


def no_rdma_expected(check):
    """True when this host has no RDMA NIC and none is expected: hca_count 0, and a readable sysfs (interfaces in
    /sys/class/net) shows nothing in /sys/class/infiniband. Checks of the RDMA stack then have nothing to judge."""
    return (check.expect("hca_count", int) == 0 and not check.listdir(IB_CLASS)
            and bool(check.listdir("/sys/class/net")))


NO_RDMA = "no RDMA device on this host and none expected"


def port_gid(check, dev, port, index):
    """(gid, type) of one GID table slot; gid None when the slot is absent or all zeros."""
    base = "%s/%s/ports/%s/" % (IB_CLASS, dev, port)
    gid = (check.read("%sgids/%s" % (base, index)) or "").strip()
    kind = (check.read("%sgid_attrs/types/%s" % (base, index)) or "").strip()
    if not gid or not gid.replace("0", "").replace(":", ""):
        return None, kind
    return gid, kind


def port_up(port):
    return port.get("state") == "ACTIVE" and port.get("phys_state") == "LinkUp"


def data_ports(ports, profile):
    """The ports of the GPU fabric: the InfiniBand ones; on an all-Ethernet (RoCE) host, the ports of
    the adapter model that reaches the profile's rate, not the slower control-plane/storage NICs."""
    # ibstat builds older than the RoCE era print no link layer: those ports are InfiniBand
    infiniband = [p for p in ports if (p.get("link_layer") or "InfiniBand") == "InfiniBand"]
    if infiniband:
        return infiniband
    ethernet = [p for p in ports if p.get("link_layer") == "Ethernet"]
    if not ethernet:
        return []
    want = float(profile.get("ib_rate") or 0)
    fast = {p.get("hca_type") for p in ethernet if (p.get("rate_gbps") or 0) >= want}
    if not fast:
        best = max(p.get("rate_gbps") or 0 for p in ethernet)
        fast = {p.get("hca_type") for p in ethernet if (p.get("rate_gbps") or 0) == best}
    if fast == {""}:  # adapter model unknown: only the rate tells the rails apart
        return [p for p in ethernet if (p.get("rate_gbps") or 0) >= want]
    return [p for p in ethernet if p.get("hca_type") in fast]


# ---- nccl-tests output (shared by the NCCL checks) --------------------------------------------------
NCCL_FAILURE_RE = re.compile(r"Test (?:NCCL |CUDA )?failure|Test timeout|NCCL failure|CUDA failure")
LAUNCHER_FAILURE_RE = re.compile(r"not enough slots available|mpirun (?:was unable|noticed|detected)|"
                                 r"ORTE was unable|PRTE has lost communication|No such file or directory.*_perf")


def parse_nccl_tests(text):
    """nccl-tests stdout: result rows, out-of-bounds and average lines, NCCL WARN and failure lines.

    Columns are read by name from the table header, so both the old layout (`error`, no `root`) and
    the new one (`root`, `#wrong`) parse; without a header the token count decides. Each row is
    {size, busbw: [out-of-place, in-place], wrong: [..]} with None for N/A cells.
    """
    out = {"rows": [], "oob_values": None, "oob_ok": None, "avg_busbw": None, "warns": [], "failures": [],
           "transports": [], "gdr": False}
    columns = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            body = line.lstrip("#").split()
            if "size" in body and "busbw" in body:
                columns = body
            match = re.match(r"#\s*Out of bounds values\s*:\s*(\d+)\s+(\w+)", line)
            if match:
                out["oob_values"], out["oob_ok"] = int(match.group(1)), match.group(2).upper() == "OK"
            match = re.match(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)", line)
            if match:
                out["avg_busbw"] = float(match.group(1))
            continue
        if "NCCL WARN" in line:
            out["warns"].append(line)
        if NCCL_FAILURE_RE.search(line):
            out["failures"].append(line)
        for via in re.findall(r"via ((?:NET|P2P|SHM)/[\w/\-]+)", line):
            out["transports"].append(via)
            out["gdr"] = out["gdr"] or via.endswith("GDRDMA")
        row = _nccl_row(line.split(), columns)
        if row is not None:
            out["rows"].append(row)
    return out


def _nccl_row(tokens, columns):
    if not tokens or not tokens[0].isdigit():
        return None
    if columns is None or len(columns) != len(tokens):
        columns = {13: ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                        "algbw", "busbw", "#wrong"],
                   12: ["size", "count", "type", "redop", "time", "algbw", "busbw", "error", "time", "algbw",
                        "busbw", "error"]}.get(len(tokens))
        if columns is None:
            return None
    busbw = [to_float(t) for c, t in zip(columns, tokens) if c == "busbw"]
    # new builds count mismatching elements (#wrong); old ones print the max deviation (error), which is
    # within tolerance unless the Out-of-bounds line says FAILED
    wrong = [to_float(t) for c, t in zip(columns, tokens) if c in ("#wrong", "wrong")]
    if not busbw:
        return None
    return {"size": int(tokens[0]), "busbw": busbw, "wrong": wrong}


NCCL_TESTS_DIRS = ("/opt/nccl-tests/build", "/opt/nccl_tests/build", "/usr/local/bin", "/workspace/nccl-tests/build",
                   "/usr/local/nccl-tests/build")


def find_nccl_test(name):
    """An nccl-tests binary on PATH, in $NCCL_TESTS_DIR or the usual build directories."""
    found = which(name)
    if found:
        return found
    for directory in (os.environ.get("NCCL_TESTS_DIR", ""), *NCCL_TESTS_DIRS):
        path = os.path.join(directory, name)
        if directory and os.access(path, os.X_OK):
            return path
    return None


def run_nccl_test(check, argv, timeout, env=None):
    """Run nccl-tests and parse it; retry without -T on builds too old to know that option."""
    cmd = check.run(argv, timeout=timeout, env=env)
    if "-T" in argv and ("invalid option" in cmd.text or "unrecognized option" in cmd.text):
        at = argv.index("-T")
        cmd = check.run(argv[:at] + argv[at + 2:], timeout=timeout, env=env)
    return cmd, parse_nccl_tests(cmd.text)


def _nccl_failure_kind(line):
    lower = line.lower()
    if "timeout" in lower:
        return "hang"
    return "nccl_failure" if "nccl" in lower else "cuda_failure" if "cuda" in lower else "test_failure"


def judge_nccl_test(check, cmd, result):
    """Verdicts every nccl-tests check shares: launcher trouble (UNKNOWN), failures and hangs, wrong
    results (FAIL). Returns the largest-size row, with metrics size_bytes/busbw/avg_busbw_sweep set;
    finishes the check itself when there is no row to judge."""
    if LAUNCHER_FAILURE_RE.search(cmd.text) and not result["rows"]:
        check.unknown("the test did not start: %s" % next(
            line.strip() for line in cmd.text.splitlines() if LAUNCHER_FAILURE_RE.search(line)))
    specific = [line for line in result["failures"] if not line.startswith("..")]
    for line in specific or result["failures"][:1]:  # " .. host pid N: Test failure" only echoes the cause
        check.fail(_nccl_failure_kind(line), check.host, "%s failed: %s" % (os.path.basename(cmd.argv[0]),
                                                                             line.strip()), line)
    if cmd.timed_out and not result["rows"]:
        check.fail("hang", check.host, "%s did not finish in time (hang)" % os.path.basename(cmd.argv[0]))
    wrong = [r for r in result["rows"] if any(w for w in r["wrong"] if w)]
    if result["oob_ok"] is False:
        check.fail("data_corruption", check.host, "Out of bounds values : %s FAILED (wrong results: suspect "
                   "GPU/NVLink silent data corruption)" % result["oob_values"])
    elif wrong:
        check.fail("data_corruption", check.host, "#wrong %s at %d B (suspect GPU/NVLink silent data corruption)"
                   % (wrong[0]["wrong"], wrong[0]["size"]))
    if not result["rows"]:
        if not any(f["severity"] == "FAIL" for f in check.findings):
            check.unknown("no result rows in the output (%s)" % cmd.why())
        check.finish()
    largest = max(result["rows"], key=lambda r: r["size"])
    values = [b for b in largest["busbw"] if b is not None]
    check.metrics.update({"size_bytes": largest["size"], "busbw": round(sum(values) / max(len(values), 1), 2),
                          "avg_busbw_sweep": result["avg_busbw"]})
    return largest
