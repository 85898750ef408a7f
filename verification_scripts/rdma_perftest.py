#!/usr/bin/env python3
"""rdma_perftest: ib_write_bw loopback on every GPU rail, with GPU memory when GPUDirect RDMA is there.

Per HCA (Azure NHC's method): start `ib_write_bw -d <dev> -p <port> -s 8388608 -F --report_gbits
--perform_warm_up [--use_cuda=<gpu>]` as server, then the same plus `localhost` as client. The 8 MiB
row's BW average is compared with the profile (380 Gb/s NDR+GDR on H100, 180 on HDR A100). Without
--report_gbits perftest reports MB/sec (older) or MiB/sec (newer); both are converted. Failure texts
map to causes: "Port number 1 state is Down" (port down), "Couldn't allocate MR" with --use_cuda (no
GPUDirect RDMA), "Unable to find the Infiniband/RoCE device".
"""

import re
import shutil
import subprocess
import time

import checklib
import checklib_net

MSG_SIZE = 8388608
BASE_PORT = 18515
UNIT_TO_GBPS = {"Gb/sec": 1.0, "MB/sec": 8 / 1000.0, "MiB/sec": 8 * 1.048576 / 1000.0}
ERRORS = (
    (re.compile(r"Port number \d+ state is (\w+)"), "fail", "port_down", "port state is {0}"),
    (re.compile(r"Couldn't allocate MR|Failed to create MR"), "fail", "gdr_mr_failed",
     "cannot register GPU memory with the HCA (GPUDirect RDMA unavailable)"),
    (re.compile(r"Unable to find the Infiniband/RoCE device|IB device \S+ not found"), "fail", "device_missing",
     "device not found by perftest"),
    (re.compile(r"Failed to modify QP \S* ?to RT[RS]"), "fail", "qp_modify_failed", "QP could not reach RTR/RTS"),
    (re.compile(r"Couldn't connect to|Unable to open file descriptor|Couldn't listen|Unable to init the socket"),
     "skip", "not_run", "loopback could not connect (TCP port in use or firewall)"),
)


def parse_perftest(text):
    """(Gb/s average, message size) of the largest-size result row, or None."""
    unit = re.search(r"BW average\[(Gb/sec|MB/sec|MiB/sec)\]", text)
    if not unit:
        return None
    best = None
    for match in re.finditer(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", text, re.MULTILINE):
        size, avg = int(match.group(1)), float(match.group(4))
        if best is None or size >= best[1]:
            best = (avg * UNIT_TO_GBPS[unit.group(1)], size)
    return best


def classify(text):
    for pattern, kind, fid, message in ERRORS:
        match = pattern.search(text)
        if match:
            return kind, fid, message.format(*match.groups()), match.group(0)
    return None


def gpu_memory_plan(check):
    """GPU count and whether ib_write_bw may use GPU memory (nvidia_peermem / nv_peer_mem loaded; None when
    the loaded modules cannot be listed)."""
    listing = check.run(["nvidia-smi", "-L"])
    gpus = len(re.findall(r"^GPU \d+:", listing.out, re.MULTILINE)) if listing.ok else 0
    modules, _ = checklib.loaded_modules(check)
    return gpus, None if modules is None else bool(modules & {"nvidia_peermem", "nv_peer_mem"})


def loopback(check, port, index, gpus, gdr):
    argv = ["ib_write_bw", "-d", port["dev"], "-i", str(port["port"]), "-p", str(BASE_PORT + index),
            "-s", str(MSG_SIZE), "-F", "--report_gbits", "--perform_warm_up"]
    if port["link_layer"] == "Ethernet":
        table = [checklib_net.port_gid(check, port["dev"], port["port"], i) for i in range(16)]
        v2 = [i for i, (gid, kind) in enumerate(table) if gid and "v2" in kind]
        if v2:  # the last RoCE v2 entry is the IPv4-mapped one, as NCCL would pick
            argv += ["-x", str(v2[-1])]
    if gpus and gdr:
        argv.append("--use_cuda=%d" % (index % gpus))
    check.cmds.append(" ".join(argv))
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        time.sleep(float(check.params.get("server_wait_s", 1.0)))
        client = check.run([*argv, "localhost"], timeout=int(check.params.get("per_hca_timeout_s", 60)))
        try:
            server_out = server.communicate(timeout=10)[0].decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            server.kill()
            server_out = server.communicate()[0].decode("utf-8", "replace")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return client, server_out


def body(check):
    data = checklib_net.data_ports(checklib_net.rdma_ports(check), check.profile)
    if not data:
        check.unknown("no GPU-rail RDMA ports in /sys/class/infiniband")
    if shutil.which("ib_write_bw") is None:
        check.unknown("ib_write_bw not found (perftest not installed)")
    threshold = check.expect("ib_write_bw_gbps")
    gpus, gdr = gpu_memory_plan(check)
    check.metrics.update({"gpu_memory": bool(gpus and gdr), "threshold_gbps": threshold, "bw_gbps": {}})
    if gpus and gdr is False:
        check.warn("gdr_unavailable", "nvidia_peermem", "nvidia_peermem not loaded: GPUDirect RDMA unavailable, "
                   "measured host memory only")
    ran = 0
    for index, port in enumerate(data):
        check.targets.append(port["dev"])
        client, server_out = loopback(check, port, index, gpus, gdr)
        text = client.text + "\n" + server_out
        result = parse_perftest(client.out)
        problem = classify(text)
        if client.unusable and result is None and problem is None:
            if not any(f["severity"] == "FAIL" for f in check.findings):
                check.unknown(client.why())
            check.info("not_run", port["dev"], "%s: %s" % (port["dev"], client.why()))
            continue
        if result is not None:
            gbps = result[0]
            ran += 1
            check.metrics["bw_gbps"][port["dev"]] = round(gbps, 2)
            if threshold and gbps < threshold:
                check.fail("bw_low", port["dev"], "%s ib_write_bw %.1f Gb/s < %.0f Gb/s (%s)"
                           % (port["dev"], gbps, threshold, "GPU memory" if gpus and gdr else "host memory"))
        elif problem is not None and problem[0] == "fail":
            ran += 1
            check.fail(problem[1], port["dev"], "%s: %s" % (port["dev"], problem[2]), problem[3])
        elif problem is not None:
            check.warn(problem[1], port["dev"], "%s: %s" % (port["dev"], problem[2]), problem[3])
        else:
            check.warn("unparsed", port["dev"], "%s: no result row (%s)" % (port["dev"], client.why()),
                       checklib.first_line(text))
    if not ran:
        check.unknown("ib_write_bw produced no result on any of %d rails" % len(data))
    if threshold is None and not any(f["severity"] in ("FAIL", "WARN") for f in check.findings):
        check.no_expectation("ib_write_bw_gbps", seen="ib_write_bw loopback ran on %d rails (see metrics)" % ran)
    check.finish("ib_write_bw loopback >= %.0f Gb/s on all %d rails (%s memory)"
                 % (threshold or 0, len(data), "GPU" if gpus and gdr else "host"))


if __name__ == "__main__":
    checklib.main("rdma_perftest", body)
