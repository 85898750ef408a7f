#!/usr/bin/env python3
"""nccl_internode: the network path NCCL takes, measured on one node by IB loopback (Azure NHC's method).

With NCCL_SHM_DISABLE=1 and NCCL_P2P_DISABLE=1 every ring hop between local GPUs crosses the HCAs, so
`all_reduce_perf -b 8G -e 8G -g <gpus>` under the job's own NCCL environment shows which transport
NCCL picks (NCCL_DEBUG=INFO: "via NET/IB/0/GDRDMA", "NET/Socket"), whether GPUDirect RDMA is used,
and the per-rail bandwidth (Azure: >= 40 GB/s on NDR, >= 18 on HDR; derived from the profile's rate
unless the profile sets nccl_ib_loopback_busbw). NET/Socket where RDMA rails are up, NCCL WARNs about
devices or completions, and low bandwidth fail. `use_mpirun: true` runs one rank per GPU under mpirun;
launcher problems such as "not enough slots" are UNKNOWN.
"""

import re

import checklib
import checklib_gpu
import checklib_net

LOOPBACK_EFFICIENCY = 0.8  # busbw / (rail rate in GB/s) below which a loopback counts as slow
BAD_WARNS = (
    (re.compile(r"Unable to open device (\S+)"), "ib_device_unusable", "NCCL cannot open HCA {0}"),
    (re.compile(r"Bootstrap : no socket interface found"), "bootstrap_no_interface",
     "NCCL finds no usable socket interface (NCCL_SOCKET_IFNAME?)"),
    (re.compile(r"Got completion (?:from peer \S+ )?with error (\d+)"), "ib_completion_error",
     "RDMA completion error {0}"),
    (re.compile(r"Got async event : (.+)"), "ib_async_event", "HCA async event: {0}"),
    (re.compile(r"ibv_\w+ failed"), "verbs_call_failed", "verbs call failed"),
)


def threshold(check):
    """The loopback busbw a healthy rail reaches, or None when this host has no expectation for it."""
    explicit = check.expect("nccl_ib_loopback_busbw")
    if explicit:
        return explicit
    rate = check.expect("ib_rate")
    return rate / 8.0 * LOOPBACK_EFFICIENCY if rate else None


def command(check, binary, gpus, env):
    size = str(check.params.get("size", "8G"))
    test_timeout = str(int(check.params.get("test_timeout_s", 300)))
    args = ["-b", size, "-e", size, "-f", "2", "-c", "1", "-T", test_timeout]
    if not check.params.get("use_mpirun"):
        return [binary, *args, "-g", str(gpus)]
    exports = []
    for key in sorted(env):
        exports += ["-x", "%s=%s" % (key, env[key])]
    return ["mpirun", "--allow-run-as-root", "-np", str(gpus), "--bind-to", "numa", *exports, binary, *args, "-g", "1"]


def judge_transport(check, result, rails):
    nets = sorted({via.split("/")[1] for via in result["transports"] if via.startswith("NET/")})
    check.metrics.update({"transports": nets, "gdrdma": result["gdr"]})
    up = [p for p in rails if checklib_net.port_up(p)]
    if "Socket" in nets and up:
        check.fail("net_socket", check.host, "NCCL used NET/Socket although %d RDMA rails are up (%s)"
                   % (len(up), ", ".join(p["dev"] for p in up[:4])))
    elif not nets and result["rows"]:
        check.info("no_transport_lines", check.host, "no NCCL INFO 'via NET/...' lines to tell the transport")
    if nets and "Socket" not in nets and not result["gdr"]:
        check.warn("no_gdrdma", check.host, "NCCL channels over NET/%s without GDRDMA: GPU data is staged through "
                   "host memory (GPUDirect RDMA off)" % "/".join(nets))
    for line in result["warns"]:
        text = line.split("NCCL WARN", 1)[1].strip()
        for pattern, fid, message in BAD_WARNS:
            match = pattern.search(text)
            if match:
                check.fail(fid, match.group(1) if fid == "ib_device_unusable" else check.host,
                           message.format(*match.groups()), line)
                break
        else:
            check.info("nccl_warn", check.host, text, line)


def body(check):
    binary = checklib_net.find_nccl_test("all_reduce_perf")
    if binary is None:
        check.unknown("all_reduce_perf not found (nccl-tests not installed; set NCCL_TESTS_DIR)")
    rails = checklib_net.data_ports(checklib_net.rdma_ports(check), check.profile)
    if not rails and check.expect("hca_count", int) == 0:
        check.unknown("no RDMA NIC on this host and none expected: there is no inter-node fabric to loop back over")
    gpus, why = checklib_gpu.local_gpu_count(check)
    if gpus is None:
        check.unknown("cannot tell how many GPUs to test: %s" % why)
    env = {"NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    argv = command(check, binary, gpus, env)
    cmd, result = checklib_net.run_nccl_test(check, argv, float(check.params.get("run_timeout_s", 420)), env=env)
    if cmd.missing:
        check.unknown(cmd.why())
    judge_transport(check, result, rails)
    largest = checklib_net.judge_nccl_test(check, cmd, result)
    limit = threshold(check)
    busbw = check.metrics["busbw"]
    check.metrics["threshold"] = round(limit, 2) if limit else None
    if limit is None and not any(f["severity"] in ("FAIL", "WARN") for f in check.findings):
        check.no_expectation("ib_rate", seen="IB loopback busbw %.1f GB/s at %d B" % (busbw, largest["size"]))
    if limit and busbw < limit:
        check.fail("busbw_low", check.host, "IB loopback all_reduce busbw %.1f GB/s at %d B < %.1f GB/s"
                   % (busbw, largest["size"], limit))
    check.finish("IB loopback busbw %.1f GB/s >= %.1f over NET/%s%s" % (
        busbw, limit or 0, "/".join(check.metrics["transports"]) or "?", " with GDRDMA" if result["gdr"] else ""))


if __name__ == "__main__":
    checklib.main("nccl_internode", body)
