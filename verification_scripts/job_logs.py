#!/usr/bin/env python3
"""job_logs: what the job's own logs say happened (the logs attached to the incident: `aidai diagnose --logs DIR`).

The runner passes the tail of each attached log file in params["job_logs"] ([{"name", "text"}], one file a node:
its name without the extension is the node); without them the check is UNKNOWN (nothing to read, so nothing to
judge). It reads the lines torchrun, Accelerate and DeepSpeed print (`[rankN]:` prefixes, the elastic agent's
failure summary, DeepSpeed's `exits with return code`) and separates each rank's own failure from the errors its
peers print because it failed (gloo/NCCL "Connection closed by peer", store timeouts, SIGTERM from the launcher):

  * python_exception: a rank's own Python exception (which node and rank, which exception); one that names CUDA,
    NCCL, the GPU or its driver is left to the checks of those (never the script's error);
  * non_finite_loss: a NaN/Inf loss guard fired (FloatingPointError, "loss is nan", torch's anomaly check);
  * host_oom: the host's memory ran out in a rank (MemoryError, "can't allocate memory", std::bad_alloc);
  * rank_sigkilled: a rank was killed by SIGKILL while its launcher kept running (the OOM killer's signal: a
    cgroup or host memory limit) - WARN, since another sender is possible;
  * exit_without_traceback: a rank exited with an error code and printed no traceback (sys.exit / os._exit);
  * node_vanished: a node's log stops without an error or a launcher summary while its peers lost their
    connections to it (its processes, launcher included, were killed at once);
  * port_in_use: the rendezvous or store port was taken (EADDRINUSE);
  * disk_full: a write failed with ENOSPC (No space left on device);
  * data_file_missing: a file the job reads is not there (FileNotFoundError);
  * socket_ifname: the socket interface the job was told to use does not exist on a node (GLOO/NCCL_SOCKET_IFNAME);
  * param_shape_mismatch: ranks hold parameters of different shapes (nodes run different code versions);
  * rank_left_collective: every other rank timed out in a collective while this one never did (it stopped calling
    collectives: a hang in user code);
  * collective_timeout_all: every rank on every node timed out in a collective, none failed first and none stopped
    calling collectives (the ranks could not reach each other: a partition, a firewall);
  * peer_unreachable: connections to a peer were refused, timed out or had no route;
  * device_failure (INFO): a rank's GPU or driver failed (Xid, CUDA error): it failed first, so its peers' timeouts
    say nothing of the network; the GPU checks judge the GPU.

Every finding names the node (the log file) and, where the log says, the rank. The logs are the incident's own, so
the findings are events of the incident. No command is run: the text is only read.
"""

import re

import checklib

MAX_LINES = 200000
RANK_PREFIX = re.compile(r"^(?:\[default\d+\]:)?\[rank(\d+)\]:\s?")
LOCAL_PREFIX = re.compile(r"^\[default(\d+)\]:")
RANK_TOKEN = re.compile(r"\[rank\s?(\d+)\]|\brank\s*:\s*(\d+)\b|\bRANK=(\d+)\b")
EXCEPTION = re.compile(r"^((?:[A-Za-z_][\w]*\.)*[A-Z][\w]*(?:Error|Exception|Interrupt|Exit|Failure))(?::\s?(.*))?$")
# the errors a rank prints because a peer failed, or because its launcher stopped it: not its own failure
COLLATERAL = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|Failed to recv|got 0 bytes|"
    r"Timed out waiting \d+ ?ms|wait timeout after|timed out after \d+|Watchdog caught collective operation timeout|"
    r"RendezvousConnectionError|RendezvousClosedError|The connection to the C10d store has failed|"
    r"ChildFailedError|SignalException|Signal \d+ \(SIG\w+\) received|Process group watchdog|"
    r"ProcessGroupNCCL is aborting|NCCL communicator was aborted|remote process exited or there was a network error|"
    r"DistBackendError|KeyboardInterrupt", re.I)
TIMEOUT = re.compile(r"Timed out waiting \d+ ?ms for (?:send|recv)|wait timeout after \d+|Watchdog caught collective "
                     r"operation timeout|collective operation timeout|timed out after \d+ ?ms", re.I)
NON_FINITE = re.compile(r"^FloatingPointError\b|\bloss (?:is|became|=)\s*(?:nan|inf|-inf)\b|NaN or Inf found|"
                        r"non-finite (?:loss|values?)|returned nan values|Function '\w+' returned nan", re.I)
HOST_OOM = re.compile(r"^MemoryError\b|DefaultCPUAllocator: can't allocate memory|\[Errno 12\] Cannot allocate memory|"
                      r"std::bad_alloc|Out of memory: Kill|oom-kill", re.I)
DISK_FULL = re.compile(r"No space left on device|\[Errno 28\]|\bENOSPC\b|Disk quota exceeded|\[Errno 122\]", re.I)
# torch.save's stream writer when a write comes up short (what a full disk or quota does to it, without the errno)
SHORT_WRITE = re.compile(r"inline_container\.cc:\d+\]\s*\.\s*unexpected pos \d+ vs \d+|PytorchStreamWriter failed "
                         r"writing file|basic_ios::clear: iostream error", re.I)
LOST = re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe|Failed to recv|got 0 bytes", re.I)
DS_MAPPING = re.compile(r"global_rank_mapping=.*?\{(.*)\}\)?\s*$")
DS_NODE = re.compile(r"'([^']+)':\s*\[([\d,\s]*)\]")
# the store could not listen at all (torch also warns "failed to bind to [::]:PORT (errno: 98 - Address already in
# use)" when it then listens on IPv4: that warning is no failure), or a Python exception for the bind
PORT_IN_USE = re.compile(r"failed to listen on any local network address|^(?:\w+\.)*\w*(?:Error|Exception):.*"
                         r"(?:\[Errno 98\]|Address already in use|EADDRINUSE)", re.I)
IFNAME = re.compile(r"Unable to find address for:?\s*(\S+)|no socket interface found|"
                    r"Bootstrap : no socket interface|SOCKET_IFNAME.{0,40}(?:not found|no such)", re.I)
SHAPE = re.compile(r"appears not to match (?:sizes|strides) of the same param|size mismatch for \S+|"
                   r"params?\[\d+\] in this process with sizes", re.I)
UNREACHABLE = re.compile(r"Connection refused|No route to host|Network is unreachable|connect\(\) timed out|"
                         r"Connection timed out|\[Errno 111\]|\[Errno 113\]|\[Errno 110\]", re.I)
# an exception the GPU, its driver or a communication library raised in the rank: the GPU checks' and NCCL leaves'
# to judge, never the script's own error
NOT_SCRIPT = re.compile(r"\bCUDA\b|cuDNN|CUBLAS|cuBLAS|\bNCCL\b|\bGPU\b|device-side|\bECC\b|\bXid\b|out of memory|"
                        r"OutOfMemoryError|\bNVML\b|\bdriver\b|\bnvrtc\b|\bHIP\b|\bROCm\b", re.I)
# a rank's GPU or its driver failed (the GPU checks judge why): that rank failed first, its peers' timeouts follow
DEVICE_FAILURE = re.compile(r"NVRM: Xid|CUDA error|CUDAError|Cuda failure|uncorrectable ECC|fallen off the bus", re.I)
FILE_MISSING = re.compile(r"^FileNotFoundError\b.*?['\"]([^'\"]+)['\"]?")
# the launcher's word on each worker it lost
TORCHRUN_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
TORCHRUN_HOST = re.compile(r"^\s*host\s*:\s*(\S+)")
TORCHRUN_CODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
DEEPSPEED_CODE = re.compile(r"--local_rank=(\d+)'?\]? exits with return code = (-?\d+)")
ELASTIC_CODE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
LAUNCHER_DONE = re.compile(r"Root Cause \(first observed failure\)|exits with return code = |ChildFailedError|"
                           r"failed \(exitcode: ", re.I)


def node_of(name):
    base = name.rsplit("/", 1)[-1]
    for ext in (".log", ".out", ".err", ".txt"):
        if base.endswith(ext):
            return base[: -len(ext)]
    return base


class Node(object):
    """What one node's log says."""

    def __init__(self, name, text):
        self.name = name
        self.lines = text.splitlines()[-MAX_LINES:]
        self.ranks = set()  # ranks this log shows
        self.own = []  # (rank or None, kind, line): failures of the rank itself
        self.collateral = {}  # rank -> first collateral line
        self.timeouts = {}  # rank or None -> line
        self.tracebacks = set()  # ranks that printed a traceback
        self.exits = []  # (rank or None, local rank or None, code) reported by the launcher
        self.launcher_said = False
        self.unreachable = []
        self.device = []  # (rank or None, line): the rank's GPU or driver failed
        self.lost = False  # a rank here lost its connection to a peer
        self.anonymous = False  # a worker (a `[defaultN]:` line) printed an error without saying its rank
        self.mapping = {}  # DeepSpeed: node -> its global ranks
        self.parse()

    def parse(self):
        summary = {}
        for raw in self.lines:
            line = raw.rstrip()
            rank = None
            match = RANK_PREFIX.match(line)
            body = line
            if match:
                rank = int(match.group(1))
                body = line[match.end():]
            else:
                local = LOCAL_PREFIX.match(line)
                if local:
                    body = line[local.end():]
                    if "Traceback (most recent call last)" in body or EXCEPTION.match(body.strip()):
                        self.anonymous = True
            for token in RANK_TOKEN.finditer(line):
                self.ranks.add(int(next(g for g in token.groups() if g is not None)))
            mapping = DS_MAPPING.search(line)
            if mapping:
                for host, ranks in DS_NODE.findall(mapping.group(1)):
                    self.mapping[host] = [int(r) for r in ranks.replace(" ", "").split(",") if r]
            if LAUNCHER_DONE.search(line):
                self.launcher_said = True
            if "Traceback (most recent call last)" in body:
                self.tracebacks.add(rank)
            if TIMEOUT.search(body):
                self.timeouts.setdefault(rank, line)
            if UNREACHABLE.search(body) and not COLLATERAL.search(body):
                self.unreachable.append((rank, line))
            self.launcher_lines(line, summary)
            stripped = body.strip()
            if DEVICE_FAILURE.search(stripped):
                self.device.append((rank, line))
            if LOST.search(stripped):
                self.lost = True
            for kind, pattern in (("port_in_use", PORT_IN_USE), ("disk_full", DISK_FULL), ("short_write", SHORT_WRITE),
                                  ("socket_ifname", IFNAME), ("param_shape_mismatch", SHAPE)):
                if pattern.search(stripped):
                    self.own.append((rank, kind, line))
                    break
            else:
                exc = EXCEPTION.match(stripped)
                if exc is None:
                    continue
                if COLLATERAL.search(stripped):
                    self.collateral.setdefault(rank, line)
                elif NON_FINITE.search(stripped):
                    self.own.append((rank, "non_finite_loss", line))
                elif HOST_OOM.search(stripped):
                    self.own.append((rank, "host_oom", line))
                elif FILE_MISSING.match(stripped):
                    self.own.append((rank, "data_file_missing", line))
                elif UNREACHABLE.search(stripped) or NOT_SCRIPT.search(stripped):
                    continue
                elif rank is not None or not stripped.startswith(("torch.distributed.", "RuntimeError: [")):
                    self.own.append((rank, "python_exception", line))

    def launcher_lines(self, line, summary):
        """torchrun/Accelerate's failure summary (host, rank, exitcode per failed worker) and DeepSpeed's
        `exits with return code` lines."""
        match = TORCHRUN_HOST.match(line)
        if match:
            summary.clear()
            summary["host"] = match.group(1)
            return
        match = TORCHRUN_RANK.match(line)
        if match and "host" in summary:
            summary["rank"], summary["local"] = int(match.group(1)), int(match.group(2))
            return
        match = TORCHRUN_CODE.match(line)
        if match and "rank" in summary:
            self.exits.append((summary["rank"], summary["local"], int(match.group(1)), summary["host"]))
            summary.clear()
            return
        match = DEEPSPEED_CODE.search(line)
        if match:
            self.exits.append((None, int(match.group(1)), int(match.group(2)), self.name))


def where(node, rank):
    return node.name if rank is None else "%s rank %d" % (node.name, rank)


def body(check):
    files = check.params.get("job_logs")
    if not isinstance(files, list) or not files:
        # nothing to read: the leaf's other checks decide (agent/evidence.py), and no view hid anything
        check.unknown("no job logs attached to the incident (aidai diagnose --logs DIR): nothing to read", needs="logs")
    nodes = []
    for item in files:
        if isinstance(item, dict) and isinstance(item.get("text"), str) and item.get("name"):
            nodes.append(Node(node_of(str(item["name"])), item["text"]))
    if not nodes or not any(n.lines for n in nodes):
        check.unknown("the attached job logs are empty")
    check.metrics["nodes"] = [n.name for n in nodes]
    check.metrics["lines"] = sum(len(n.lines) for n in nodes)
    reported = set()

    def report(kind, node, rank, severity, message, line):
        key = (kind, node.name, rank)
        if key in reported:
            return
        reported.add(key)
        check.finding(kind, severity, node.name, "%s: %s" % (where(node, rank), message), line.strip())

    messages = {
        "python_exception": "the rank failed with its own exception",
        "non_finite_loss": "a NaN/Inf loss guard stopped the rank",
        "host_oom": "the host's memory ran out in the rank",
        "data_file_missing": "a file the job reads is missing",
        "port_in_use": "the rendezvous/store port is already in use (EADDRINUSE)",
        "disk_full": "a write failed: no space left on the device",
        "short_write": "torch.save could not write the whole file (a full disk or quota does this)",
        "socket_ifname": "the socket interface the job was told to use does not exist on this node",
        "param_shape_mismatch": "the ranks' parameters have different shapes: the nodes run different code",
    }
    owners = {}  # (node, rank) -> kinds: what each rank failed of itself
    for node in nodes:
        for rank, kind, line in node.own:
            owners.setdefault((node.name, rank), set()).add(kind)
            exc = EXCEPTION.match(RANK_PREFIX.sub("", LOCAL_PREFIX.sub("", line.strip())).strip())
            detail = messages[kind]
            if kind == "python_exception" and exc:
                detail = "%s (%s)" % (messages[kind], exc.group(1))
            if kind == "short_write":  # the stream's words, not the errno: a full disk is the likely cause
                report("disk_full", node, rank, "WARN", detail, line)
                continue
            report(kind, node, rank, "FAIL", detail, line)
    by_name = {n.name: n for n in nodes}
    # a rank the launcher says exited with an error code, which printed no traceback and no error of its own
    for node in nodes:
        for rank, local, code, host in node.exits:
            owner = by_name.get(host, node)
            anonymous = owner.anonymous or bool(owners)  # another rank failed of itself: this exit followed
            if code > 0 and rank is not None and rank not in owner.tracebacks and (owner.name, rank) not in owners \
                    and rank not in owner.collateral and not anonymous:
                report("exit_without_traceback", owner, rank, "FAIL",
                       "exited with code %d and printed no traceback (the script or a library exited on purpose)"
                       % code, "rank %d exitcode %d" % (rank, code))
            elif code > 0 and rank is None and not node.own and not node.collateral and not node.tracebacks:
                report("exit_without_traceback", owner, None, "FAIL",
                       "local rank %d exited with code %d and printed no traceback" % (local, code),
                       "local_rank %d return code %d" % (local, code))
            elif code == -9:
                report("rank_sigkilled", owner, rank, "WARN",
                       "killed by SIGKILL (exit -9) while its launcher kept running: the kernel's OOM killer (a "
                       "cgroup or host memory limit) is the usual sender", "exitcode -9")
    # a node whose log simply stops (no error, no launcher summary) while its peers lost their connection
    peers_lost = [n for n in nodes if n.lost]
    vanished = set()
    for node in nodes:
        silent = not node.own and not node.collateral and not node.tracebacks and not node.launcher_said \
            and not node.timeouts
        if silent and node.lines and any(p is not node for p in peers_lost):
            vanished.add(node.name)
            report("node_vanished", node, None, "FAIL",
                   "its log stops without an error or a launcher summary while %d peer node(s) lost their "
                   "connections: the node's processes, launcher included, were killed at once"
                   % len([p for p in peers_lost if p is not node]), node.lines[-1])
    # a rank the job knows that printed nothing while its peers lost their connection, no rank failed of itself and
    # nothing timed out: it exited without a word (DeepSpeed names only the process it noticed first)
    timed_any = any(n.timeouts for n in nodes)
    killed = any(f["id"] == "rank_sigkilled" for f in check.findings)
    if peers_lost and not owners and not timed_any and not killed:
        mapping = {}
        for node in nodes:
            mapping.update(node.mapping)
        for node in nodes:
            if node.name in vanished:
                continue
            ranks = set(mapping.get(node.name, [])) | node.ranks
            for rank in sorted(ranks):
                if rank not in node.tracebacks and rank not in node.collateral and not node.anonymous \
                        and node.launcher_said:
                    report("exit_without_traceback", node, rank, "FAIL",
                           "printed no error while its peers lost their connection to it, and its launcher reported "
                           "a failed worker: it exited without a traceback", node.lines[-1])
    # collective timeouts: the ranks that never timed out while the others did stopped calling collectives
    # (a lost node explains its peers' timeouts; and "all wait for one" means the quiet ranks are the fewer)
    timed = {(n.name, r) for n in nodes for r in n.timeouts}
    failed_device = [(n, rank, line) for n in nodes for rank, line in n.device[:1]]
    for node, rank, line in failed_device:
        report("device_failure", node, rank, "INFO", "its GPU or driver failed (the GPU checks judge why); the other "
               "ranks' errors follow from it", line)
    if timed and not owners and not vanished and not failed_device:
        known = {(n.name, r) for n in nodes for r in n.ranks}
        left = sorted(k for k in known - timed if (k[0], None) not in timed)
        quiet = [n for n in nodes if not n.timeouts]
        waited = next(line for n in nodes for line in n.timeouts.values())
        if left or quiet:  # some never timed out: the one the others waited for, when they are the fewer
            suspects = left or [(n.name, None) for n in quiet]
            fewer = len(left) < len(timed) if left else len(quiet) < len(nodes) - len(quiet)
            for name, rank in suspects if fewer else []:
                report("rank_left_collective", by_name[name], rank, "FAIL",
                       "never timed out in the collective its peers timed out in (%d rank(s)): it stopped calling "
                       "collectives" % len(timed), waited)
        else:
            for node in nodes:
                report("collective_timeout_all", node, None, "FAIL",
                       "every rank on every node timed out in a collective and none failed first or stopped calling "
                       "collectives: the ranks could not reach each other (a partition, a firewall)",
                       next(iter(node.timeouts.values())))
    for node in nodes:
        for rank, line in node.unreachable[:1]:
            report("peer_unreachable", node, rank, "FAIL", "a connection to a peer was refused, timed out or had "
                   "no route", line)
    # on a host the logs name, its own findings: where the failure is (the others' are theirs to report)
    if check.host in by_name:
        elsewhere = [f for f in check.findings if f["entity"] != check.host]
        check.findings = [f for f in check.findings if f["entity"] == check.host]
        if elsewhere:
            check.metrics["elsewhere"] = sorted({"%s@%s" % (f["id"], f["entity"]) for f in elsewhere})
    check.finish("the job's logs (%d node(s), %d lines) show no failure this check knows%s"
                 % (len(nodes), check.metrics["lines"], " on %s" % check.host if check.host in by_name else ""))


if __name__ == "__main__":
    checklib.main("job_logs", body)
