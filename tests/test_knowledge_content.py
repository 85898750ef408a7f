"""The shipped knowledge: the markdown KB under knowledge/kb (pipeline 3) and the seed incident DB.

Content checks only: the files are parsed the way the indexer parses them, but nothing is embedded and no
store is opened, so these tests stay fast and need no model.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from agent.knowledge.incident_db import SEED_PATH, read_jsonl
from agent.knowledge.kb_index import KB_DIR, Passage, kb_files, split_doc, split_front_matter
from agent.taxonomy import Taxonomy, load_taxonomy

MAX_PASSAGE_CHARS = 2000  # the indexer cuts at ~1500 where it can; nothing the KB ships should exceed this
URL = re.compile(r"^https?://\S+$")
AREAS = {"gpu", "system_software", "interconnect", "framework", "user_application", "other", "system_facts",
         "known_bad_versions", "general"}
STEP_LINE = re.compile(r"^\s*(?:[-*]|\d+[.)])\s+\S")  # what the offline reasoner turns into exploration steps

DOCS = kb_files(KB_DIR)


def _doc_id(path: Path) -> str:
    return path.relative_to(KB_DIR).as_posix()


@pytest.fixture(scope="module")
def tax() -> Taxonomy:
    return load_taxonomy()


@pytest.fixture(scope="module")
def parsed() -> dict[str, tuple[dict, list[Passage]]]:
    out: dict[str, tuple[dict, list[Passage]]] = {}
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        meta, _ = split_front_matter(text)
        passages, problems = split_doc(_doc_id(path), text)
        assert not problems, problems
        out[_doc_id(path)] = (meta or {}, passages)
    return out


def test_kb_has_docs_in_every_area() -> None:
    assert len(DOCS) >= 25
    areas = {path.relative_to(KB_DIR).parts[0] for path in DOCS}
    assert areas == AREAS, f"unexpected or missing areas: {areas ^ AREAS}"
    assert all(len(path.relative_to(KB_DIR).parts) == 2 for path in DOCS), "docs live in knowledge/kb/<area>/"


@pytest.mark.parametrize("path", DOCS, ids=_doc_id)
def test_doc_is_well_formed(path: Path, tax: Taxonomy) -> None:
    text = path.read_text(encoding="utf-8")
    meta, body = split_front_matter(text)
    assert meta is not None, "no YAML front matter"
    assert set(meta) <= {"title", "nodes", "sources"}, f"unknown front matter keys: {set(meta)}"
    assert isinstance(meta.get("title"), str) and meta["title"].strip()
    nodes, sources = meta.get("nodes"), meta.get("sources")
    assert isinstance(nodes, list) and nodes, "nodes: a non-empty list of taxonomy labels"
    assert isinstance(sources, list) and sources, "sources: a non-empty list of URLs"
    labels = set(tax.labels())
    unknown = [n for n in nodes if n not in labels]
    assert not unknown, f"not taxonomy labels (spell them exactly): {unknown}"
    assert len(set(nodes)) == len(nodes), "duplicate nodes"
    bad_urls = [s for s in sources if not isinstance(s, str) or not URL.match(s)]
    assert not bad_urls, f"sources must be http(s) URLs: {bad_urls}"
    passages, problems = split_doc(_doc_id(path), text)
    assert not problems, problems
    assert len(passages) >= 2, "a doc should have at least an overview and one `##` section"
    assert "##" in body


@pytest.mark.parametrize("path", DOCS, ids=_doc_id)
def test_passages_are_bounded_and_actionable(path: Path) -> None:
    passages, _ = split_doc(_doc_id(path), path.read_text(encoding="utf-8"))
    long = [(p.heading, len(p.text)) for p in passages if len(p.text) > MAX_PASSAGE_CHARS]
    assert not long, f"passages over {MAX_PASSAGE_CHARS} chars: {long}"
    headings = re.findall(r"^##\s+(.+?)\s*$", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert len(headings) == len(set(headings)), f"duplicate `##` headings: {headings}"
    steps = sum(1 for p in passages for line in p.body.splitlines() if STEP_LINE.match(line))
    assert steps >= 5, "give the reasoner concrete bullet steps"


@pytest.mark.parametrize("path", DOCS, ids=_doc_id)
def test_section_nodes_are_the_docs_own(path: Path) -> None:
    """A section names fewer of its doc's causes, never others (the doc's front matter lists what it covers)."""
    meta, _ = split_front_matter(path.read_text(encoding="utf-8"))
    passages, _ = split_doc(_doc_id(path), path.read_text(encoding="utf-8"))
    strays = {(p.heading, n) for p in passages for n in p.nodes if n not in (meta or {}).get("nodes", [])}
    assert not strays, f"section nodes not in the doc's nodes: {sorted(strays)}"


def test_titles_are_unique(parsed: dict[str, tuple[dict, list[Passage]]]) -> None:
    titles = Counter(meta["title"] for meta, _ in parsed.values())
    assert not [t for t, n in titles.items() if n > 1]


def test_every_subcategory_has_a_doc(tax: Taxonomy, parsed: dict[str, tuple[dict, list[Passage]]]) -> None:
    tagged = {node for meta, _ in parsed.values() for node in meta["nodes"]}
    subcategories = [node.label for main in tax.children() for node in main.children]
    assert len(subcategories) >= 20
    missing = [sub for sub in subcategories if not any(t == sub or t.startswith(sub + ".") for t in tagged)]
    assert not missing, f"subcategories without a KB doc: {missing}"


def test_every_leaf_is_reachable_from_the_kb(tax: Taxonomy, parsed: dict[str, tuple[dict, list[Passage]]]) -> None:
    """kb_index serves a doc for its labels, their ancestors and descendants: every leaf has some doc below
    its main category (a subcategory or leaf tag, not only the main category)."""
    tagged = {node for meta, _ in parsed.values() for node in meta["nodes"] if "." in node}
    missing = [leaf.label for leaf in tax.leaves()
               if not any(leaf.label == t or leaf.label.startswith(t + ".") for t in tagged)]
    assert not missing, missing


def test_system_facts_and_known_bad_pages(parsed: dict[str, tuple[dict, list[Passage]]]) -> None:
    facts = {doc: passages for doc, (_, passages) in parsed.items() if doc.startswith("system_facts/")}
    text = "\n".join(p.text for passages in facts.values() for p in passages)
    assert "mlx5_1" in text and "control-plane" in text
    assert "NV18" in text and "NV12" in text
    known_bad = {doc: meta for doc, (meta, _) in parsed.items() if doc.startswith("known_bad_versions/")}
    assert len(known_bad) >= 4
    body = "\n".join(p.text for doc, (_, passages) in parsed.items() if doc in known_bad for p in passages)
    for needle in ("CVE-2024-0132", "1.16.2", "2.22.3", "525.105.17", "0.13", "2304"):
        assert needle in body, needle


def test_seed_incidents_cover_every_leaf(tax: Taxonomy) -> None:
    leaves = set(tax.labels(leaves_only=True))
    records, rejected = read_jsonl(SEED_PATH, known_labels=leaves)
    assert not rejected, [str(r) for r in rejected]
    assert records
    ids = [record.id for _, record in records]
    assert len(ids) == len(set(ids))
    covered = Counter(record.label for _, record in records)
    missing = sorted(leaves - set(covered))
    assert not missing, f"leaves without a seed incident: {missing}"


# ---- no seed incident or KB passage restates a dev-set incident ------------------------------------------------
# The dev set is what the benchmark scores; its id/source/description are copied to
# tests/fixtures/dev_incident_texts.jsonl, the only copy this test reads. A seed record or KB document must not
# cite a dev incident's source, nor copy its distinctive log lines or identifiers (job ids, file names, addresses).

DEV_TEXTS = Path(__file__).parent / "fixtures" / "dev_incident_texts.jsonl"
GITHUB_REF = re.compile(r"github\.com/[\w.-]+/([\w.-]+)/(?:issues|pull|discussions)/(\d+)", re.I)
SHORT_REF = re.compile(r"(?<![\w/.#-])(?:[\w.-]+/)?([\w.-]+)#(\d+)\b")  # owner/repo#N or repo#N
URL_TOKEN = re.compile(r"https?://[^\s<>()\"'`]+", re.I)
LOG_PREFIX = re.compile(r"^(?:\[[^\]]*\]:?\s*"                       # [rank0]:, [Tue Apr  9 01:21:38 2024]
                        r"|[\w.-]+:\d+:\d+\s+\[\d+\]\s*"                # host:pid:tid [gpu] (NCCL)
                        r"|[A-Z][a-z]{2}\s+\d+\s+[\d:]+\s+\S+\s+kernel:\s*)+")  # syslog
MIN_LINE = 40
IDENTIFIER = re.compile(
    r"\b\d{6,}\b"                                       # job ids, pids, dataset file numbers
    r"|\b0x[0-9a-f]{8,}\b"                              # addresses
    r"|\b[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d\b"     # PCI bus ids with domain
    r"|\b[\w-]*\d[\w-]*\.(?:jpe?g|png|json|pt|ckpt|log)\b"  # file names
    r"|\b\d{1,3}(?:\.\d{1,3}){3}\b"                     # IPv4 addresses
    r"|\bip(?:-\d+){4}\b", re.I)                        # EC2-style host names
# Stock messages that the software prints verbatim in every occurrence of the failure (thousands of unrelated
# public reports carry them); sharing one of these is naming the failure class, not restating an incident.
GENERIC_LINES = {
    'docker: error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
    "runtimeerror: cuda error: uncorrectable ecc error encountered",
    "runtimeerror: cuda error: unspecified launch failure",
    "nvrm: the nvidia probe routine failed for 1 device(s).",
    "nccl info net/plugin : no plugin found (libnccl-net.so), using internal implementation",
}
GENERIC_IDENTIFIERS = {"9637888"}  # the size NCCL gives its default shared-memory segment


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _refs(text: str) -> set[tuple[str, str]]:
    """(repo, number) of every GitHub issue/PR cited; the owner is dropped (repos move between orgs)."""
    return ({(m.group(1).lower(), m.group(2)) for m in GITHUB_REF.finditer(text)}
            | {(m.group(1).lower(), m.group(2)) for m in SHORT_REF.finditer(text)})


def _urls(text: str) -> set[str]:
    out = set()
    for match in URL_TOKEN.finditer(text):
        url = re.sub(r"^https?://(?:www\.)?", "", match.group(0).lower()).split("#")[0].split("?")[0]
        out.add(url.rstrip("/.,;:"))
    return out


def _dev_lines(description: str) -> set[str]:
    """Normalised log/error lines of a dev description (and its backtick-quoted spans), MIN_LINE chars or more."""
    pieces = description.splitlines() + re.findall(r"`([^`\n]+)`", description)
    lines = {_norm(LOG_PREFIX.sub("", piece.strip()).strip("`'\" ")) for piece in pieces}
    return {line for line in lines if len(line) >= MIN_LINE}


def _knowledge_texts() -> dict[str, str]:
    """Every seed record (all its text fields) and every KB document (front matter included), by name."""
    texts: dict[str, str] = {}
    for line in SEED_PATH.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            texts[f"seed:{rec['id']}"] = "\n".join(str(rec.get(k, "")) for k in
                                                   ("description", "environment", "resolution", "source"))
    for path in DOCS:
        texts[f"kb:{_doc_id(path)}"] = path.read_text(encoding="utf-8")
    return texts


@pytest.fixture(scope="module")
def dev_incidents() -> list[dict]:
    return [json.loads(line) for line in DEV_TEXTS.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_dev_fixture_is_the_dev_set(dev_incidents: list[dict]) -> None:
    assert len(dev_incidents) >= 50
    assert all(rec.get("source") and rec.get("description") for rec in dev_incidents)
    assert len({rec["id"] for rec in dev_incidents}) == len(dev_incidents)


def test_normalisers_catch_the_forms_in_use() -> None:
    assert _refs("fixed upstream (pytorch#153760)") == {("pytorch", "153760")}
    assert _refs("see NVIDIA/nccl#1251 and https://github.com/deepspeedai/DeepSpeed/issues/5030") == {
        ("nccl", "1251"), ("deepspeed", "5030")}
    assert _refs("after PR #4906") == set()
    assert _urls("https://www.github.com/a/b/blob/master/x.md (section: y)") == {"github.com/a/b/blob/master/x.md"}
    assert _dev_lines("[rank0]:   RuntimeError: CUDA error: an illegal memory access was encountered") == {
        "runtimeerror: cuda error: an illegal memory access was encountered"}


def test_no_knowledge_cites_a_dev_incident_source(dev_incidents: list[dict]) -> None:
    dev_refs = {ref: rec["id"] for rec in dev_incidents for ref in _refs(rec["source"])}
    dev_urls = {url: rec["id"] for rec in dev_incidents for url in _urls(rec["source"])}
    assert dev_refs and dev_urls
    cited = []
    for name, text in _knowledge_texts().items():
        cited += [(name, dev_refs[ref]) for ref in _refs(text) if ref in dev_refs]
        cited += [(name, dev_urls[url]) for url in _urls(text) if url in dev_urls]
    assert not cited, f"seed records / KB documents citing a dev-set incident's source: {sorted(set(cited))}"


def test_no_knowledge_copies_dev_log_lines_or_identifiers(dev_incidents: list[dict]) -> None:
    texts = {name: _norm(text) for name, text in _knowledge_texts().items()}
    copied = []
    for rec in dev_incidents:
        for line in _dev_lines(rec["description"]) - GENERIC_LINES:
            copied += [(name, rec["id"], line) for name, text in texts.items() if line in text]
        for ident in {m.group(0).lower() for m in IDENTIFIER.finditer(rec["description"])} - GENERIC_IDENTIFIERS:
            pattern = re.compile(r"(?<![\w.])" + re.escape(ident) + r"(?!\w)")
            copied += [(name, rec["id"], ident) for name, text in texts.items() if pattern.search(text)]
    assert not copied, f"text copied from a dev-set incident: {copied}"
