"""The job's logs attached to an incident (`--logs DIR`), as the checks that read them get them in their params.

Files are found and named by node as L4 finds them (`agent/l4/reader.py`: `<node>.log`, `<node>/rank<k>.log`,
gzipped or not); a node's files are joined. A failure is at the end of a log, so each node keeps its last
`PER_NODE_BYTES` and the whole at most `TOTAL_BYTES` (the params travel on the check's stdin, over SSH too);
files that are not text are left out. The text is data for the check to read, never a command.
"""

from __future__ import annotations

from agent.l4.reader import LogError, discover, read_chunks

PER_NODE_BYTES = 1 << 20
TOTAL_BYTES = 8 << 20
MAX_NODES = 512


def read_job_logs(path: str) -> list[dict[str, str]]:
    """[{"name": node, "text": its last lines}] for the logs under `path` (a directory or one file)."""
    try:
        files = discover(path)
    except LogError:
        return []
    tails: dict[str, bytes] = {}
    cut: set[str] = set()
    for log in files:
        if log.node not in tails and len(tails) >= MAX_NODES:
            continue
        kept = tails.get(log.node, b"")
        try:
            for chunk in read_chunks(log.path):
                kept += chunk
                if len(kept) > PER_NODE_BYTES:
                    kept = kept[-PER_NODE_BYTES:]
                    cut.add(log.node)
        except LogError:
            continue
        tails[log.node] = kept
    budget = max(TOTAL_BYTES // max(len(tails), 1), 4096)
    out = []
    for node, data in tails.items():
        text = data[-budget:].decode("utf-8", "replace")
        if len(data) > budget or node in cut:  # cut inside a line: drop its remains
            text = text.partition("\n")[2]
        out.append({"name": node, "text": text})
    return out
