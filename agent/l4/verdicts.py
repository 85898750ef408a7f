"""The launcher's verdicts: which node failed first, and which stayed silent while the others failed.

Counting events ranks a loud survivor above a quiet culprit: when a rank exits without a traceback (os._exit, the
kernel's OOM killer, a segfault) or a whole node dies or hangs, the other nodes fill their logs with tracebacks
about a peer that closed the connection or a collective that timed out. The launcher says more than the counts:
torchrun's elastic agent logs `failed (exitcode: N)` with a timestamp the moment one of its workers dies, so
    * the node whose agent reports first, clearly before the next, lost a worker first, when the others failed
      reacting to a peer (the victims' workers fail when they notice, later; when every node fails its own
      start-up check, which launcher reports first is a race);
    * a node that logs no failure at all while every other node does, and they noticed a peer go (a closed
      connection, a timeout), has vanished (killed, power loss) and is where the job broke;
    * when every node that reports failed because a collective timed out (nobody closed a connection) and some
      node never reports, that node stopped calling collectives: it hung, and the others waited for it;
    * when every rank's gloo collective timed out (a partition: nobody closed anything, nobody is silent), the ranks
      in rank order time out receiving up to one rank and sending after it (the ring's order, wrapping around):
      the ring stalled at that rank's node. Seen on every such job of the fault lab (seeds 9 and 201-206: 18 jobs,
      three launchers, 2-8 nodes), where the ring broke at the partitioned node;
    * when nothing failed loudly (the job was stopped from outside, or is still waiting), a node whose own elastic
      agent could not send its keep-alive heartbeat to the rendezvous, while no other's failed and before any node
      logged a failure (the launcher's shutdown included), was starved or cut off: the others only waited for it.
      After a failure every surviving agent may miss its heartbeats (the store's host is gone), so only the one
      node, and only before any failure.
Only what the logs say is used; clocks of one cluster agree to well under the margins below.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from agent.l4 import stages
from agent.l4.scan import FileScan

# A launcher's report that one of its workers died (torchrun's elastic agent; the DeepSpeed launcher).
REPORT = re.compile(r"failed \(exitcode: -?<\*>\)|failed \(exitcode: -?\d+\)|exits with return code", re.I)
# The launcher's own lines, which say that its reports are in these logs: torchrun's rendezvous, or its entry point
# in the agent's traceback when the rendezvous logged nothing, Accelerate's `accelerate launch` (it runs torch's
# elastic agent with a static rendezvous, which logs nothing at start: its frames in the agent's traceback name it),
# the DeepSpeed launcher's start-up lines on every node.
AGENT = re.compile(r"torch/distributed/elastic/rendezvous/|torch/distributed/run\.py|accelerate/commands/launch\.py|"
                   r"\[launch\.py:[^\]]*:main\] (?:WORLD INFO DICT|nnodes=)")
# A reaction to a peer that went away actively (its socket was closed when it died) ...
PEER_GONE = re.compile(r"closed by (?:remote )?peer|reset by peer|broken pipe|connection (?:was likely )?closed|"
                       r"failed to recv|RendezvousConnectionError|connection to the c10d store", re.I)
# ... and to one that said nothing: a collective or a store operation timed out.
TIMED_OUT = re.compile(r"timed out|timeout|time out", re.I)
# torchrun's agent on this node could not reach the rendezvous store in time
HEARTBEAT = re.compile(r"failed to send a keep-alive heartbeat", re.I)
# gloo's own words when a rank's part of a collective times out, with the rank the launcher's prefix names
GLOO_TIMEOUT = re.compile(r"\[rank(\d+)\]:.*Timed out waiting \d+ms for (send|recv) operation", re.I)
_GLOG = re.compile(r"(?<![\w.])[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d(?:\.\d+)?)\b")
_ISO = re.compile(r"\b\d{4}-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d(?:[.,]\d+)?)\b")
FIRST_MARGIN_S = 0.3  # the first report must precede the next by this much to say which node failed first
# a launcher's verdict outranks every count (a count score passes 1 on a few jobs: at 1.0 the partitioned node
# lost to counts on 5 of 24 seen lab partitions)
VERDICT_WEIGHT = 10.0


@dataclass
class Verdict:
    node: str
    why: str


def timestamp(line: str) -> float | None:
    """Seconds since the start of the year (months as 31 days: only differences within a job matter) from a glog
    (`E1127 12:41:11.722000`) or ISO (`2026-11-27 12:41:11,722`) stamp."""
    match = _GLOG.search(line) or _ISO.search(line)
    if not match:
        return None
    month, day, hour, minute = (int(g) for g in match.groups()[:4])
    return (((month * 31 + day) * 24 + hour) * 60 + minute) * 60 + float(match.group(5).replace(",", "."))


@dataclass
class _Node:
    report: str = ""
    report_time: float | None = None
    failing: bool = False  # a line that says something failed (the last lines a log happened to end on do not)
    peer_gone: bool = False
    timed_out: bool = False
    agent: bool = False  # the launcher logged here (see AGENT)
    heartbeat_time: float | None = None  # its agent's first missed keep-alive heartbeat (see HEARTBEAT)
    failure_time: float | None = None  # its first dated failure line other than a missed heartbeat


def verdicts(used: list[FileScan], maps: list[np.ndarray], failure: np.ndarray) -> list[Verdict]:
    """The nodes the launcher's reports point at, most certain first; empty when they say nothing clear."""
    nodes: dict[str, _Node] = {}
    for scan, tmap in zip(used, maps, strict=True):
        node = nodes.setdefault(scan.node, _Node())
        failed = failure[tmap]
        for k, shape in enumerate(scan.shapes):
            example = scan.examples[k]
            node.failing |= bool(failed[k]) and stages.failure_weight(shape) != stages.UNWORDED
            node.agent |= AGENT.search(shape) is not None or AGENT.search(example) is not None  # paths: masked
            if HEARTBEAT.search(example) and (when := timestamp(example)) is not None:
                node.heartbeat_time = min(when, node.heartbeat_time or when)
            elif failed[k] and (when := timestamp(example)) is not None:
                node.failure_time = min(when, node.failure_time or when)
            if REPORT.search(shape):
                when = timestamp(example)
                if when is not None and (node.report_time is None or when < node.report_time):
                    node.report, node.report_time = example.strip(), when
                elif not node.report:
                    node.report = example.strip()
            elif failed[k]:
                node.peer_gone |= PEER_GONE.search(example) is not None
                node.timed_out |= TIMED_OUT.search(example) is not None
    if len(nodes) < 2 or not any(v.agent for v in nodes.values()):
        return []  # no launcher verdict to read (the simulated NCCL jobs: the counts and peer names decide)
    failing = [n for n, v in nodes.items() if v.failing or v.report]
    vanished = [n for n, v in nodes.items() if not v.failing and not v.report]
    # ... and the others noticed a peer go (a closed connection, a timeout), not a failure of their own
    noticed = any(nodes[n].peer_gone or nodes[n].timed_out for n in failing)
    if vanished and failing and noticed and len(vanished) <= len(nodes) / 2:
        return [Verdict(n, "lost: its log ends without an error while every other node reports the failure")
                for n in vanished]
    # every rank timed out in gloo: no node hung (a hung rank logs no timeout), whatever its launcher reported
    ring = _ring_break(used)
    if ring is not None:
        return [ring]
    reporters = [n for n, v in nodes.items() if v.report]
    silent = [n for n, v in nodes.items() if not v.report]
    if reporters and silent and len(silent) < len(reporters) and \
            all(nodes[n].timed_out and not nodes[n].peer_gone for n in reporters):
        return [Verdict(n, "silent: the other nodes' workers timed out waiting in a collective and their launchers "
                           "reported them failed; this node's launcher reported nothing") for n in silent]
    timed = sorted((v.report_time, n) for n, v in nodes.items() if v.report_time is not None)
    # the others failed reacting to a peer (a closed connection, a timeout), not each on an error of its own (every
    # rank failing one start-up check: who reports first is then the launchers' race)
    victims = all(nodes[n].peer_gone or nodes[n].timed_out for _, n in timed[1:])
    if timed and victims and (len(timed) == 1 or timed[1][0] - timed[0][0] >= FIRST_MARGIN_S):
        first = timed[0][1]
        lead = f"{timed[1][0] - timed[0][0]:.1f} s before the next" if len(timed) > 1 else "the only one"
        return [Verdict(first, f"first to fail: its launcher reported a worker failed {lead}: {nodes[first].report}")]
    missed = [(v.heartbeat_time, n) for n, v in nodes.items() if v.heartbeat_time is not None]
    failed_at = [t for v in nodes.values() for t in (v.report_time, v.failure_time) if t is not None]
    if len(missed) == 1 and all(missed[0][0] < t - FIRST_MARGIN_S for t in failed_at):
        return [Verdict(missed[0][1], "starved or cut off: its launcher could not send its keep-alive heartbeat to the "
                                   "rendezvous before any worker failed, and no other node's missed one")]
    return []


def _ring_break(used: list[FileScan]) -> Verdict | None:
    """The node where gloo's ring stalled, when every rank timed out in a collective: in rank order
    (wrapping around) one run of ranks timed out receiving and the rest sending; the run's last rank is the
    break. A node's ranks of one kind share a line shape, so each node gives its first rank of each kind: enough,
    as a node's ranks are consecutive."""
    seen: dict[int, tuple[str, str]] = {}
    lines: dict[str, int] = {}
    for scan in used:
        for example, count in zip(scan.examples, scan.counts, strict=True):
            if match := GLOO_TIMEOUT.search(example):
                seen.setdefault(int(match.group(1)), (match.group(2).lower(), scan.node))
                lines[scan.node] = lines.get(scan.node, 0) + count
    # every rank timed out: every node logged as many such lines (a rank that hung in its own code logs none, and
    # its node fewer than the others)
    if set(lines) != {scan.node for scan in used} or len(set(lines.values())) != 1:
        return None
    order = [seen[rank] for rank in sorted(seen)]
    ends = [i for i, (kind, _) in enumerate(order) if kind == "recv" and order[(i + 1) % len(order)][0] == "send"]
    if len(ends) != 1:
        return None
    ranks = sorted(seen)
    end, after = ranks[ends[0]], ranks[(ends[0] + 1) % len(ranks)]
    return Verdict(order[ends[0]][1], f"the ring stalled here: every rank's gloo collective timed out, in rank order "
                                      f"receiving up to rank {end} (this node) and sending from rank {after} on")
