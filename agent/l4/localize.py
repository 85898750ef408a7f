"""The L4 pipeline: scan files -> templates -> cross-job filter -> temporal + spatial comparison -> stage -> result.

Failure-indicating events are the templates that survive the cross-job filter, are not part of the regular
iteration pattern, and occur where the job went wrong: after a file's last iteration (the crash or hang) or in a
suspicious iteration. Nodes are ranked by an Isolation Forest over their counts of the surviving events, plus
their silence on job-wide reports and their failure evidence (failure wording, weighted by how few nodes log it).

Role asymmetry and long healthy runs: lines a node repeats through its file (progress, timers) are routine, and
lines a file logged before its first progress line are start-up, however rare elsewhere; in a file without progress
lines the trouble begins at its first failure-worded line. The failed stage is the stage each file was in there.
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field, PrivateAttr

from agent.l4 import combined, filtering, sequences, spatial, stages, temporal, verdicts
from agent.l4.patterns import PatternLibrary, PatternMatch
from agent.l4.reader import LogError, discover
from agent.l4.scan import FileScan
from agent.l4.templates import TemplateMiner, canonical, fold_digits

REGULAR_MIN_SEGMENTS = 3  # an event in this many normal iterations (and REGULAR_FRACTION of them) is routine
REGULAR_FRACTION = 0.1
MAX_EVENT_NODES = 20
WIDESPREAD = 0.75  # a failure event logged by this fraction of the nodes is a job-wide report (watchdog timeouts)
ROUTINE_MIN_LINES = 5  # a template repeated this often over ROUTINE_SPAN of a file is routine, however rare elsewhere
ROUTINE_SPAN = 0.25
ONSET_LOOKBACK = 5  # lines new just before a file's first failure-worded line belong to it (a stack's frames)
LOST_WEIGHT = 1.0  # a node lost mid-run (silent, named by its peers' connection errors) outranks every other signal
# a failure line that names the other end of a broken connection (NCCL's socket and IB errors, gloo, c10d stores)
PEER_WORDING = re.compile(r"remote peer|by peer|from peer|closed by|reset by|connection (?:to|with|from)|"
                          r"peer (?:host|address|rank)", re.I)


class NodeOut(BaseModel):
    node: str
    score: float
    events: list[str]  # templates that make the node deviate; "missing: ..." when it lacks what others log


class EventOut(BaseModel):
    id: str
    template: str
    count: int
    nodes: list[str]  # at most MAX_EVENT_NODES, most lines first
    example: str = ""


class IterationOut(BaseModel):
    iteration: int
    score: float
    nodes: list[str]
    events: list[str]


class SkippedFile(BaseModel):
    path: str
    reason: str


class TemplateOut(BaseModel):
    id: str
    template: str
    count: int


class L4Result(BaseModel):
    nodes: list[NodeOut] = Field(default_factory=list)
    events: list[EventOut] = Field(default_factory=list)
    stage: str = "unknown"
    iterations: list[IterationOut] = Field(default_factory=list)
    patterns: list[PatternMatch] = Field(default_factory=list)
    skipped_files: list[SkippedFile] = Field(default_factory=list)
    lines: int = 0
    seconds: float = 0.0
    files: int = 0
    success_jobs: int = 0
    templates: list[TemplateOut] = Field(default_factory=list)  # every template of the failed job, saved with it
    _shape_template: dict[str, str] = PrivateAttr(default_factory=dict)

    def template_of(self, line: str) -> str | None:
        """The template id this run gave to a raw line's shape (None if no such shape was seen)."""
        return self._shape_template.get(canonical(fold_digits(line.encode()).decode()))


def scan_all(files: list, engine: str = "local", scheduler: str | None = None) -> list[FileScan]:
    from agent.l4.dask_stage import scan_files

    return scan_files(files, engine=engine, scheduler=scheduler)


def localize(logs: str | Path, success: list[str | Path] | None = None, *, engine: str = "auto",
             scheduler: str | None = None, library: PatternLibrary | None = None) -> L4Result:
    began = time.perf_counter()
    files = discover(logs)
    if not files:
        raise LogError(f"{logs}: no log files (*.log, *.txt, *.out, *.err, *.gz)")
    success_files = [discover(d) for d in success or []]
    with tempfile.TemporaryDirectory(prefix="aidai-l4-") as tmp:
        split = combined.expand(files, Path(tmp) / "failed")
        split_success = [combined.expand(job, Path(tmp) / f"success{k}") for k, job in enumerate(success_files)]
        if split is not files or any(a is not b for a, b in zip(split_success, success_files, strict=True)):
            # the per-node parts live in this machine's temporary directory, which a remote scheduler cannot read
            engine, scheduler = "local", None
        files, success_files = split, split_success
        everything = files + [f for job in success_files for f in job]
        scans = scan_all(everything, engine=engine, scheduler=scheduler)
    failed = scans[: len(files)]
    pool, start = [], len(files)
    for job in success_files:
        pool.append(scans[start:start + len(job)])
        start += len(job)
    result = analyse(failed, pool, library)
    result.seconds = round(time.perf_counter() - began, 3)
    return result


def analyse(failed: list[FileScan], pool: list[list[FileScan]], library: PatternLibrary | None = None) -> L4Result:
    used = [s for s in failed if not s.skipped]
    result = L4Result(skipped_files=[SkippedFile(path=s.path, reason=s.skipped) for s in failed if s.skipped],
                      lines=sum(s.lines for s in used), files=len(used), success_jobs=len(pool))
    if not used:
        return result
    miner = TemplateMiner()
    for scan in used + [s for job in pool for s in job if not s.skipped]:
        miner.add(scan.shapes)
    assignment = miner.assignment()
    texts = miner.template_texts()
    ids = sorted(texts)
    index = {tid: i for i, tid in enumerate(ids)}
    n = len(ids)
    result._shape_template = assignment
    maps = [np.array([index[assignment[s]] for s in scan.shapes], np.int64) for scan in used]

    presence = []
    for job in pool:
        present = np.zeros(n)
        for scan in job:
            if not scan.skipped:
                present[[index[assignment[s]] for s in scan.shapes]] = 1
        presence.append(present)
    keep = filtering.keep_mask(filtering.pool_fraction(presence, n))

    totals = np.zeros(n, np.int64)
    for scan, tmap in zip(used, maps, strict=True):
        np.add.at(totals, tmap, scan.counts)
    result.templates = [TemplateOut(id=ids[i], template=texts[ids[i]], count=int(totals[i]))
                        for i in np.argsort(-totals, kind="stable")]

    regular = np.zeros(n, bool)
    flagged: dict[int, dict] = {}  # iteration -> score, nodes, template indices
    in_window = np.zeros(n, bool)
    seqs = sequences.build([(tmap[scan.seq], scan.bounds) for scan, tmap in zip(used, maps, strict=True)], keep)
    for scan, seg_ids, bad in zip(used, seqs.ids, temporal.suspicious_files(seqs.ids, seqs.distinct), strict=True):
        _mark_regular(seg_ids, {s.index for s in bad}, seqs, regular)
        for s in bad:
            events = seqs.distinct[seg_ids[s.index]]
            entry = flagged.setdefault(scan.iterations[s.index], {"score": 0.0, "nodes": set(), "events": set()})
            entry["score"] = max(entry["score"], s.score)
            entry["nodes"].add(scan.node)
            entry["events"].update(events)
            in_window[list(events)] = True
    worded = np.array([stages.failure_weight(texts[t]) == 1.0 for t in ids], bool)
    routine, healthy = _routine_and_healthy(used, maps, n, flagged_any=bool(flagged), pool=bool(pool),
                                            worded=worded)
    late = np.zeros(n, bool)
    onsets = []
    for scan, tmap in zip(used, maps, strict=True):
        onset = _onset(scan, tmap, keep & ~routine & ~healthy & worded, bool(pool))
        onsets.append(onset)
        if scan.tail_start:  # what a file logs after its last progress line, the crash or hang
            late[tmap[np.array(scan.last) >= scan.tail_start]] = True
        else:  # what a file without progress lines logs from its first failure-worded line on
            late[tmap[np.array(scan.first) >= onset - ONSET_LOOKBACK]] = True
    in_window |= late
    failure = keep & ~regular & ~routine & ~healthy & in_window

    nodes = sorted({s.node for s in used})
    node_index = {name: i for i, name in enumerate(nodes)}
    node_counts = np.zeros((len(nodes), n), np.int64)
    for scan, tmap in zip(used, maps, strict=True):
        np.add.at(node_counts[node_index[scan.node]], tmap, scan.counts)
    features = np.flatnonzero(failure)
    has = node_counts[:, features] > 0
    weight = np.array([stages.failure_weight(texts[ids[t]]) for t in features]) / np.maximum(has.sum(axis=0), 1)
    widespread = (has.sum(axis=0) >= WIDESPREAD * len(nodes)) if len(nodes) >= 3 else \
        np.zeros(len(features), bool)
    lost = _lost_nodes(used, maps, failure)
    verdict = {v.node: v.why for v in verdicts.verdicts(used, maps, failure)} if not lost else {}
    for rank in spatial.rank_nodes(nodes, node_counts[:, features], weight, widespread):
        row = node_counts[node_index[rank.node], features]
        median = np.median(node_counts[:, features], axis=0)
        events = [("" if row[j] > median[j] else "missing: ") + texts[ids[features[j]]] for j in rank.events]
        score = rank.score
        if rank.node in lost:
            score = round(score + LOST_WEIGHT, 4)
            events.insert(0, f"lost: its log ends without an error of its own while {len(lost[rank.node])} "
                             f"node(s) lost their connection to it: {lost[rank.node][0]}")
        elif rank.node in verdict:
            score = round(score + verdicts.VERDICT_WEIGHT, 4)
            events.insert(0, verdict[rank.node])
        result.nodes.append(NodeOut(node=rank.node, score=score, events=events))
    result.nodes.sort(key=lambda n: -n.score)  # stable: the spatial ranking's order among equal scores

    result.events = _events(used, maps, failure, ids, texts, node_counts, nodes)
    result.iterations = [IterationOut(iteration=it, score=round(e["score"], 3), nodes=sorted(e["nodes"]),
                                      events=[texts[ids[j]] for j in sorted(e["events"])])
                         for it, e in sorted(flagged.items())]
    # the launcher's first-to-fail verdict names where the job broke: that node's stage is the job's (the others
    # failed later, in whatever stage the broken collective found them: training, for a node that failed saving)
    first = next((n for n, why in verdict.items() if why.startswith("first to fail")), None)
    result.stage = _stage(used, maps, failure, onsets, first)
    if library is not None and library.patterns:
        result.patterns = library.match({s for scan in used for s in scan.shapes})
    return result


def _lost_nodes(used: list[FileScan], maps: list[np.ndarray], failure: np.ndarray) -> dict[str, list[str]]:
    """Nodes that died mid-run: no failure event of their own in any of their files, while other nodes' failure
    lines name them as the far end of a broken connection ("Connection closed by remote peer <host>"). A node
    that stops logging is silent in every failure count, so the counts alone rank it last; a named peer that logged
    errors of its own (it timed out waiting for someone else) is a victim and is not counted. node -> one line of
    each node that names it."""
    files: dict[str, list[bool]] = {}
    for scan, tmap in zip(used, maps, strict=True):
        files.setdefault(scan.node, []).append(bool(failure[tmap].any()))
    silent = [node for node, has in files.items() if not any(has)]
    if not silent or len(silent) == len(files):
        return {}
    names = {node: re.compile(rf"(?<![\w-]){re.escape(node)}(?![\w-])", re.I) for node in silent}
    lost: dict[str, dict[str, str]] = {}  # lost node -> {node that names it: its line}
    for scan, tmap in zip(used, maps, strict=True):
        for k in np.flatnonzero(failure[tmap]):
            line = scan.examples[k]
            if not PEER_WORDING.search(line):
                continue
            for node, name in names.items():
                if node != scan.node and name.search(line):
                    lost.setdefault(node, {}).setdefault(scan.node, line.strip())
    return {node: list(by.values()) for node, by in lost.items()}


def _mark_regular(ids: np.ndarray, bad: set[int], seqs: sequences.Sequences, regular: np.ndarray) -> None:
    """Marks the events that occur in enough of a file's normal iteration segments as routine."""
    if not len(ids):
        return
    normal = np.ones(len(ids), bool)
    normal[list(bad)] = False
    per_sequence = np.bincount(ids[normal], minlength=len(seqs.distinct))
    # Segments (not lines) containing each template: a template counts once per segment however often it repeats.
    seen = np.bincount(seqs.pair_template, weights=per_sequence[seqs.pair_seq], minlength=len(regular))
    regular |= (seen >= REGULAR_MIN_SEGMENTS) & (seen >= REGULAR_FRACTION * int(normal.sum()))


def _events(used: list[FileScan], maps: list[np.ndarray], failure: np.ndarray, ids: list[str], texts: dict[str, str],
            node_counts: np.ndarray, nodes: list[str]) -> list[EventOut]:
    """Failure-indicating events in log order: by the earliest relative position at which any file logs them."""
    position = np.full(len(ids), np.inf)
    example: dict[int, str] = {}
    for scan, tmap in zip(used, maps, strict=True):
        for k in np.flatnonzero(failure[tmap]):
            t = int(tmap[k])
            rel = scan.first[k] / max(scan.lines, 1)
            if rel < position[t]:
                position[t] = rel
                example[t] = scan.examples[k]
    out = []
    for t in sorted(np.flatnonzero(failure).tolist(), key=lambda t: (position[t], ids[t])):
        per_node = node_counts[:, t]
        where = [nodes[i] for i in np.argsort(-per_node, kind="stable") if per_node[i] > 0][:MAX_EVENT_NODES]
        out.append(EventOut(id=ids[t], template=texts[ids[t]], count=int(per_node.sum()), nodes=where,
                            example=example.get(int(t), "")))
    return out


def _stage(used: list[FileScan], maps: list[np.ndarray], failure: np.ndarray, onsets: list[int],
           first_node: str | None = None) -> str:
    """The stage each file was in when its errors began (its first failure-indicating line at or after its onset),
    voted over the files (see stages.failed_stage), or over the files of `first_node` (the node that failed first) when
    they have a say; after a file's first progress line, at least training."""
    if first_node is not None:
        mine = [k for k, scan in enumerate(used) if scan.node == first_node]
        stage = _stage([used[k] for k in mine], [maps[k] for k in mine], failure, [onsets[k] for k in mine])
        # init: also the stage of a file without any marker, i.e. silence; teardown: the launcher killing the node's
        # workers after one died without a word, a reaction (the vote over every file says where the job was)
        if stage not in ("unknown", "init", "teardown"):
            return stage
    at = []
    for scan, tmap, onset in zip(used, maps, onsets, strict=True):
        first = np.array(scan.first)
        hits = np.flatnonzero(failure[tmap] & (first >= min(onset, scan.lines)))
        if not len(hits):
            hits = np.flatnonzero(failure[tmap])
        if len(hits):
            line = int(first[hits].min())
        elif scan.progress_start >= 0:  # a file that stops without an error (its node vanished): where it stopped
            line = scan.lines - 1
        else:
            continue
        stage = stages.stage_at(scan.transitions, line)
        began = max((pos for pos, _ in scan.transitions if pos <= line), default=-1)
        if stage == "teardown" and began >= line - ONSET_LOOKBACK:
            # its trouble begins with its launcher killing the workers (one died without a word): a reaction, the
            # node was in the stage before it
            stage = stages.stage_at(scan.transitions, began - 1)
        if len(hits) and any(line < first[k] <= line + stages.TRACEBACK_SPAN and stages.is_checkpoint_write(shape)
                             for k, shape in enumerate(scan.shapes)):
            stage = "checkpointing"
        # a file that logged training steps before its trouble was training, even when the framework has no
        # stage marker L4 knows (a user's `step N/M | loss X` print, a progress bar)
        if stage in ("init", "loading") and 0 <= scan.progress_start <= line:
            stage = "training"
        if len(hits) or stage == "training":  # a quiet file that ends in a summary is not a vanished node
            at.append(stage)
    return stages.failed_stage(at)


def _routine_and_healthy(used: list[FileScan], maps: list[np.ndarray], n: int, *, flagged_any: bool, pool: bool,
                         worded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Templates that are not failure-indicating whatever their rarity, because of where they occur.

    routine: repeated through a file (ROUTINE_MIN_LINES or more over ROUTINE_SPAN of it) or a progress line: a node
    that alone prints them (rank 0's progress, the last pipeline stage's timers) does so by design.
    healthy: seen in a file before its first progress line, i.e. before a job that then trained (start-up lines of
    the launcher host or rank 0). Without successful jobs to compare with, also lines without failure wording that a
    file logged while it still progressed (checkpoint saves, validation), unless temporal analysis flagged an
    iteration (then the cross-job filter and the flagged segments decide)."""
    routine = np.zeros(n, bool)
    healthy = np.zeros(n, bool)
    for scan, tmap in zip(used, maps, strict=True):
        counts, first, last = np.array(scan.counts), np.array(scan.first), np.array(scan.last)
        spread = (counts >= ROUTINE_MIN_LINES) & (last - first >= ROUTINE_SPAN * max(scan.lines, 1))
        routine[tmap[spread]] = True
        routine[tmap[scan.progress]] = True
        if scan.progress_start >= 0:
            healthy[tmap[first < scan.progress_start]] = True
            if not pool and not flagged_any:
                healthy[tmap[(first < scan.tail_start - 1) & ~worded[tmap]]] = True
    return routine, healthy


def _onset(scan: FileScan, tmap: np.ndarray, candidate: np.ndarray, pool: bool) -> int:
    """The line where a file's trouble begins: after its last progress line if it has progress lines; otherwise its
    first line of a failure-worded candidate event; a file with neither has no trouble of its own (with successful
    jobs to filter against, all of it is examined, as L4 does)."""
    if scan.tail_start:
        return scan.tail_start
    hits = np.flatnonzero(candidate[tmap])
    if len(hits):
        return int(np.array(scan.first)[hits].min())
    return 0 if pool else scan.lines
