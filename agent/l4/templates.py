"""Log templates: a two-level mask in front of Drain3, so that Drain3 sees each distinct line shape once.

Level 1 (`fold_digits`, per byte, C speed): every digit becomes `0`, so lines that differ only in numbers share a
dict key. Level 2 (`canonical`, regexes, once per distinct level-1 key): strip rank prefixes, mask hex, paths and
numbers, collapse blanks. Drain3 then clusters the canonical shapes; a template's id is a hash of its text, so it
is the same in every run that sees the same shapes (and is what the fault-pattern library stores).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from drain3.drain import Drain

WILDCARD = "<*>"
_DIGITS = bytes.maketrans(b"123456789", b"000000000")
# torchrun `--tee` ([default3]:), recent PyTorch ([rank5]:), `srun -l` (12: ) and NCCL's `host:pid:tid [dev] `
# prefixes (digits are already 0). NCCL's must go: with it every NCCL line starts with the same four tokens and Drain
# merges unrelated NCCL lines of equal length (`... NCCL INFO Using network IB` with `... net.cc:1134 -> 6`).
_PREFIX = re.compile(r"^\s*(?:\[(?:default|rank)?0+\]:\s?|0+: |[\w.-]+:0+:0+ \[0+\] )+")
_MASKS = [
    (re.compile(r"(?<![\w/.])/[\w.+-]+(?:/[\w.+-]*)+"), WILDCARD),  # absolute paths (checkpoints, data, libraries)
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), WILDCARD),  # pointers, comm ids
    (re.compile(r"\b(?=[a-fA-F]*0)[0-9a-fA-F]{4,}\b"), WILDCARD),  # bare hex (busId 3a000, hashes)
    (re.compile(r"0+(?:\.0+)?(?:[eE][-+]?0+)?"), WILDCARD),  # every remaining number, floats included
    (re.compile(r"\s+"), " "),
]
MAX_SHAPE_CHARS = 2000  # a runaway line (a dumped tensor) must not make Drain3 tokenise megabytes


def fold_digits(data: bytes) -> bytes:
    return data.translate(_DIGITS)


def canonical(folded_line: str) -> str:
    """The masked shape of one digit-folded line (the text Drain3 clusters)."""
    text = _PREFIX.sub("", folded_line[:MAX_SHAPE_CHARS])
    for pattern, repl in _MASKS:
        text = pattern.sub(repl, text)
    return text.strip()


def template_id(template: str) -> str:
    return hashlib.sha1(template.encode("utf-8")).hexdigest()[:10]


class TemplateMiner:
    """Drain3's tree over canonical shapes, with a shape -> cluster cache; no persistence in batch mode (Drain3's
    FilePersistence snapshots the whole model on every new cluster, see research/logs.md)."""

    def __init__(self, sim_th: float = 0.4, depth: int = 4, max_children: int = 100):
        self.drain = Drain(depth=depth, sim_th=sim_th, max_children=max_children, param_str=WILDCARD,
                           parametrize_numeric_tokens=True)
        self._cluster: dict[str, int] = {}

    def add(self, shapes: Iterable[str]) -> None:
        """Cluster shapes in the given order (order matters to Drain: callers pass a reproducible one)."""
        for shape in shapes:
            if shape not in self._cluster:
                cluster, _ = self.drain.add_log_message(shape or "<empty>")
                self._cluster[shape] = cluster.cluster_id

    def __len__(self) -> int:
        return len(self._cluster)

    def templates(self) -> dict[int, str]:
        """Drain cluster id -> final template (a cluster's template widens as shapes join it)."""
        return {c.cluster_id: c.get_template() for c in self.drain.clusters}

    def assignment(self) -> dict[str, str]:
        """shape -> template id (hash of the final template text)."""
        final = {cid: template_id(text) for cid, text in self.templates().items()}
        return {shape: final[cid] for shape, cid in self._cluster.items()}

    def template_texts(self) -> dict[str, str]:
        return {template_id(text): text for text in self.templates().values()}
