"""The domain knowledge base (pipeline 3's reading): markdown docs under knowledge/kb/**/*.md, each starting with
YAML front matter (title, nodes: taxonomy labels it is about, sources), split at `##` headings into passages
that keep the doc title and the heading, indexed in the Chroma collection "kb_passages" through LlamaIndex.
A section about fewer of the doc's causes says so on the line below its heading, `<!-- nodes: [LABEL, ...] -->`:
its passages are about those only (a page on five memory errors has a section per error).

The index is refreshed when the files' hash changes (kept in the collection metadata; only changed passages are
re-embedded). `query(..., nodes=[...])` keeps passages whose doc is tagged with one of the labels, an ancestor of
one (a GPU.MEMORY doc serves GPU.MEMORY.UNCORRECTABLE_ECC) or a descendant of one.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent.knowledge import store
from agent.paths import KNOWLEDGE_DIR
from agent.reasoning.base import KBPassage

KB_DIR = KNOWLEDGE_DIR / "kb"
COLLECTION = "kb_passages"  # Chroma wants 3-512 characters: "kb" is refused
KB_HASH_KEY = "kb_sha256"
FORMAT_VERSION = "2"  # bump when splitting or stored metadata change: forces a rebuild
MAX_PASSAGE_CHARS = 1500  # longer sections are cut at paragraph breaks (MiniLM reads ~256 word pieces anyway)
NODE_FLAG = "node:"  # metadata flag: the doc is tagged with exactly this label
UNDER_FLAG = "under:"  # metadata flag: the doc is tagged with this label or one below it
INTRO_HEADING = "Overview"
_FENCE = re.compile(r"^\s*(```|~~~)")
SECTION_NODES = re.compile(r"^\s*<!--\s*nodes:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Passage:
    doc: str  # path below the KB root, posix, e.g. gpu/xid_errors.md
    title: str
    heading: str
    body: str
    part: int  # position in the doc
    nodes: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.doc}#{self.part}"

    @property
    def text(self) -> str:
        return f"# {self.title}\n## {self.heading}\n\n{self.body}".strip()

    def entry(self) -> store.Entry:
        meta: dict[str, store.Scalar] = {"doc": self.doc, "title": self.title, "heading": self.heading,
                                         "nodes": ",".join(self.nodes), "sources": "\n".join(self.sources)}
        for label in self.nodes:
            meta[NODE_FLAG + label] = True
            parts = label.split(".")
            for depth in range(1, len(parts) + 1):
                meta[UNDER_FLAG + ".".join(parts[:depth])] = True
        return store.Entry(id=self.id, text=self.text, metadata=meta)


@dataclass
class KBReport:
    root: str
    docs: int = 0
    passages: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    problems: list[str] = field(default_factory=list)  # per file: unreadable, no/invalid front matter, no text
    skipped: bool = False  # nothing changed since the last build
    seconds: float = 0.0


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str | int | float):
        return [str(value)]
    if isinstance(value, list):
        return [str(v) for v in value if v is not None]
    raise ValueError(f"expected a list of strings, got {type(value).__name__}")


def split_front_matter(text: str) -> tuple[dict[str, Any] | None, str]:
    """(front matter or None when the file has none, body). ValueError on unparseable YAML."""
    text = text.lstrip("\ufeff")
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None, text
    for end in range(1, len(lines)):
        if lines[end].strip() in ("---", "..."):
            try:
                meta = yaml.safe_load("\n".join(lines[1:end])) or {}
            except yaml.YAMLError as exc:
                raise ValueError(f"front matter is not valid YAML: {exc}") from None
            if not isinstance(meta, dict):
                raise ValueError("front matter is not a YAML mapping")
            return meta, "\n".join(lines[end + 1:])
    raise ValueError("front matter is not closed by a `---` line")


def _sections(body: str) -> list[tuple[str, list[str]]]:
    """(heading, lines) per `##` section; text before the first one is the intro. Code fences are respected."""
    sections: list[tuple[str, list[str]]] = [(INTRO_HEADING, [])]
    fenced = False
    for line in body.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and re.match(r"^##\s+\S", line) and not line.startswith("###"):
            sections.append((line[2:].strip().rstrip("#").strip(), []))
            continue
        elif not fenced and re.match(r"^#\s+\S", line) and len(sections) == 1 and not "".join(sections[0][1]).strip():
            continue  # the doc's own `# Title` line: the title is already in every passage
        sections[-1][1].append(line)
    return [(heading, lines) for heading, lines in sections if "\n".join(lines).strip()]


def _chunks(lines: list[str], limit: int = MAX_PASSAGE_CHARS) -> list[str]:
    """Cut a section at blank lines outside code fences so that each chunk stays under `limit` if it can."""
    paragraphs: list[str] = []
    current: list[str] = []
    fenced = False
    for line in lines:
        if _FENCE.match(line):
            fenced = not fenced
        if not fenced and not line.strip() and current:
            paragraphs.append("\n".join(current))
            current = []
        elif line.strip() or current:
            current.append(line)
    if current:
        paragraphs.append("\n".join(current))
    chunks: list[str] = []
    for paragraph in paragraphs:
        if chunks and len(chunks[-1]) + 2 + len(paragraph) <= limit:
            chunks[-1] += "\n\n" + paragraph
        else:
            chunks.append(paragraph)
    return [c.strip() for c in chunks if c.strip()]


def split_doc(doc: str, text: str) -> tuple[list[Passage], list[str]]:
    """A markdown doc -> its passages, and problems worth telling the author (the doc is still indexed if it can)."""
    problems: list[str] = []
    try:
        meta, body = split_front_matter(text)
    except ValueError as exc:
        return [], [f"{doc}: {exc}"]
    if meta is None:
        problems.append(f"{doc}: no YAML front matter (title, nodes, sources)")
        meta = {}
    try:
        nodes = tuple(dict.fromkeys(n.strip().strip(".").upper() for n in _as_list(meta.get("nodes")) if n.strip()))
        sources = tuple(_as_list(meta.get("sources")))
    except ValueError as exc:
        return [], [f"{doc}: nodes/sources: {exc}"]
    title = str(meta.get("title") or "").strip()
    if not title:
        h1 = re.search(r"^#\s+(.+)$", body, flags=re.MULTILINE)
        title = h1.group(1).strip() if h1 else Path(doc).stem.replace("_", " ").replace("-", " ")
        problems.append(f"{doc}: no title in the front matter; using {title!r}")
    passages: list[Passage] = []
    for heading, lines in _sections(body):
        own, lines, problem = _section_nodes(lines)
        if problem:
            problems.append(f"{doc}: section {heading!r}: {problem}")
        for chunk in _chunks(lines):
            passages.append(Passage(doc=doc, title=title, heading=heading, body=chunk, part=len(passages),
                                    nodes=own or nodes, sources=sources))
    if not passages:
        problems.append(f"{doc}: no text below the front matter")
    return passages, problems


def _section_nodes(lines: list[str]) -> tuple[tuple[str, ...], list[str], str]:
    """(the labels a section's first line names, its other lines, a problem with that line or '')."""
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    match = SECTION_NODES.match(lines[first]) if first is not None else None
    if first is None or match is None:
        return (), lines, ""
    rest = lines[:first] + lines[first + 1:]
    try:
        named = yaml.safe_load(match.group(1))
        labels = tuple(dict.fromkeys(n.strip().strip(".").upper() for n in _as_list(named) if n.strip()))
    except (yaml.YAMLError, ValueError) as exc:
        return (), rest, f"its nodes line is not a list of labels ({exc}); the doc's nodes are used"
    return labels, rest, "" if labels else "its nodes line names no label; the doc's nodes are used"


def kb_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.md") if p.is_file()) if root.is_dir() else []


def kb_sha256(root: Path) -> str:
    digest = hashlib.sha256(FORMAT_VERSION.encode())
    for path in kb_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def load_passages(root: Path) -> tuple[list[Passage], list[str], int]:
    """All passages under `root`, the problems found, and the number of docs read."""
    passages: list[Passage] = []
    problems: list[str] = []
    files = kb_files(root)
    if not files:
        problems.append(f"no markdown files under {root}")
    for path in files:
        doc = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{doc}: unreadable: {exc}")
            continue
        found, issues = split_doc(doc, text)
        passages.extend(found)
        problems.extend(issues)
    return passages, problems, len(files)


def node_filter(labels: Iterable[str]) -> dict[str, Any] | None:
    """Chroma `where` keeping passages whose doc nodes are one of `labels`, an ancestor or a descendant of one."""
    clauses: list[dict[str, Any]] = []
    for raw in labels:
        label = raw.strip().strip(".").upper()
        if not label or label == "ROOT":
            continue
        clauses.append({UNDER_FLAG + label: True})
        parts = label.split(".")
        clauses.extend({NODE_FLAG + ".".join(parts[:depth]): True} for depth in range(1, len(parts)))
    unique = list({next(iter(c)): c for c in clauses}.values())
    if not unique:
        return None
    return unique[0] if len(unique) == 1 else {"$or": unique}


class KnowledgeBase(store.StoredCollection):
    """The KB index. `root` defaults to knowledge/kb; `data_dir`/`url` choose the store (agent.knowledge.store)."""

    def __init__(self, data_dir: str | Path | None = None, url: str | None = None, *, root: str | Path | None = None,
                 location: store.StoreLocation | None = None, collection: str = COLLECTION):
        super().__init__(data_dir, url, location, collection)
        self.root = Path(root) if root is not None else KB_DIR

    def ensure(self, force: bool = False) -> KBReport:
        """Refresh the index when the KB files changed (or `force`); otherwise return at once (skipped=True)."""
        start = time.perf_counter()
        digest = kb_sha256(self.root)
        report = KBReport(root=str(self.root))
        existed = store.collection_exists(self.location, self.name)
        if not force and existed and (self.collection.metadata or {}).get(KB_HASH_KEY) == digest:
            report.skipped = True
            report.seconds = time.perf_counter() - start
            return report
        passages, report.problems, report.docs = load_passages(self.root)
        report.passages = len(passages)
        counts = store.upsert(self.collection, [p.entry() for p in passages])
        report.added, report.updated, report.unchanged = counts.added, counts.updated, counts.unchanged
        report.removed = store.delete_except(self.collection, {p.id for p in passages})
        store.set_collection_metadata(self.collection, **{KB_HASH_KEY: digest})
        report.seconds = time.perf_counter() - start
        return report

    def query(self, text: str, k: int = 4, nodes: list[str] | None = None) -> list[KBPassage]:
        """The k passages nearest to `text`, best first (score = cosine in [0, 1]); with `nodes`, only passages of
        docs tagged with those taxonomy labels, their ancestors or descendants. Call ensure() once first."""
        where = node_filter(nodes) if nodes else None  # None also when only ROOT/empty labels were given
        return [KBPassage(doc=str(hit.metadata.get("doc", "")), title=str(hit.metadata.get("title", "")),
                          text=hit.text, score=round(hit.score, 4))
                for hit in store.retrieve(self.collection, text, k, where)]
