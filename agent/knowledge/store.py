"""Where the knowledge lives and how it is reached: a Chroma store (a local directory, or a Chroma server for a
team), its collections, and the LlamaIndex `VectorStoreIndex` over a collection (for writing). A similarity query
(`retrieve`) goes to Chroma's client directly: a diagnosis never imports LlamaIndex.

Location: `--data-dir DIR` / `AIDAI_DATA_DIR` / `platformdirs.user_data_dir("aidai")`, with Chroma under
`<data dir>/chroma`; or a server URL (`--chroma-url http://host:port` / `AIDAI_CHROMA_URL`). Telemetry is off.

Writes go through `upsert`: each entry carries a fingerprint (sha256 of its text and metadata) so importing
the same data again embeds nothing, and a changed entry replaces the old one (Chroma's `add`, which LlamaIndex
uses, silently keeps the old row when an id exists). Heavy libraries are imported inside the functions.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from agent.paths import default_data_dir

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection
    from llama_index.core import VectorStoreIndex

ENV_CHROMA_URL = "AIDAI_CHROMA_URL"
FINGERPRINT_KEY = "fingerprint"
SPACE: Literal["cosine"] = "cosine"
_BATCH = 500

Scalar = str | int | float | bool


class StoreError(RuntimeError):
    """The Chroma store cannot be opened or reached."""


@dataclass(frozen=True)
class StoreLocation:
    """Either a persistent Chroma directory (`path`) or a Chroma server (`url`)."""

    path: Path | None = None
    url: str | None = None

    def describe(self) -> str:
        return f"Chroma server {self.url}" if self.url else f"Chroma directory {self.path}"


def parse_url(url: str) -> tuple[str, int, bool]:
    """`http://host:port` or `https://host[:port]` -> (host, port, ssl)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise StoreError(f"bad Chroma server URL {url!r}: expected http://HOST:PORT or https://HOST[:PORT]")
    try:
        port = parts.port
    except ValueError as exc:
        raise StoreError(f"bad Chroma server URL {url!r}: {exc}") from exc
    ssl = parts.scheme == "https"
    return parts.hostname, port or (443 if ssl else 8000), ssl


def resolve_location(data_dir: str | Path | None = None, url: str | None = None) -> StoreLocation:
    """An explicit URL or directory wins, then AIDAI_CHROMA_URL, then AIDAI_DATA_DIR, then the platform default."""
    if data_dir is None:
        url = url or os.environ.get(ENV_CHROMA_URL, "").strip() or None
    if url:
        parse_url(url)
        return StoreLocation(url=url.strip().rstrip("/"))
    base = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    return StoreLocation(path=(base / "chroma").resolve())


@functools.lru_cache(maxsize=8)
def client(location: StoreLocation) -> ClientAPI:
    """One Chroma client per location per process."""
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    if location.url:
        host, port, ssl = parse_url(location.url)
        try:
            return chromadb.HttpClient(host=host, port=port, ssl=ssl, settings=settings)
        except Exception as exc:
            raise StoreError(f"cannot reach the Chroma server at {location.url}: {exc}") from exc
    assert location.path is not None
    try:
        location.path.mkdir(parents=True, exist_ok=True)
        return chromadb.PersistentClient(path=str(location.path), settings=settings)
    except Exception as exc:
        raise StoreError(f"cannot open the Chroma directory {location.path}: {exc}") from exc


def collection_exists(location: StoreLocation, name: str) -> bool:
    from chromadb.errors import NotFoundError

    try:
        client(location).get_collection(name, embedding_function=None)
    except NotFoundError:
        return False
    return True


def get_collection(location: StoreLocation, name: str) -> Collection:
    """The collection (created empty, cosine space, no Chroma-side embedding function, if missing)."""
    from chromadb.api.collection_configuration import CreateCollectionConfiguration, CreateHNSWConfiguration

    return client(location).get_or_create_collection(
        name, configuration=CreateCollectionConfiguration(hnsw=CreateHNSWConfiguration(space=SPACE)),
        embedding_function=None)


class StoredCollection:
    """One named Chroma collection at a location, opened on first use (what the incident DB and the KB share)."""

    def __init__(self, data_dir: str | Path | None, url: str | None, location: StoreLocation | None,
                 collection: str):
        self.location = location or resolve_location(data_dir, url)
        self.name = collection
        self._collection: Collection | None = None

    @property
    def collection(self) -> Collection:
        if self._collection is None:
            self._collection = get_collection(self.location, self.name)
        return self._collection

    def count(self) -> int:
        return self.collection.count()


def set_collection_metadata(collection: Collection, **values: Scalar) -> None:
    """Merge keys into the collection's metadata (Chroma replaces the whole dict on modify)."""
    merged = {k: v for k, v in (collection.metadata or {}).items() if not k.startswith("hnsw:")}
    merged.update(values)
    collection.modify(metadata=merged)


def space_of(collection: Collection) -> str:
    config = getattr(collection, "configuration_json", None) or {}  # `.configuration` warns (legacy EF config)
    for key in ("hnsw", "spann"):
        sub = config.get(key) if isinstance(config, dict) else None
        if isinstance(sub, dict) and sub.get("space"):
            return str(sub["space"])
    return str((collection.metadata or {}).get("hnsw:space", "l2"))


def distance_to_cosine(distance: float, space: str) -> float:
    """Cosine similarity of unit vectors from a Chroma distance (cosine: 1-cos; l2: squared, 2-2cos; ip: 1-dot)."""
    return 1.0 - distance / 2.0 if space == "l2" else 1.0 - distance


@dataclass(frozen=True)
class Entry:
    """One row to store: `text` is what gets embedded and returned; metadata is never embedded."""

    id: str
    text: str
    metadata: dict[str, Scalar] = field(default_factory=dict)

    def fingerprint(self) -> str:
        blob = json.dumps([self.text, self.metadata], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class UpsertCounts:
    added: int = 0
    updated: int = 0
    unchanged: int = 0


@dataclass(frozen=True)
class Hit:
    id: str
    text: str
    metadata: dict[str, Any]
    score: float  # cosine similarity clipped to [0, 1]


def _batches(items: Sequence[Any], size: int = _BATCH) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def stored_fingerprints(collection: Collection, ids: Sequence[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for chunk in _batches(list(ids)):
        got = collection.get(ids=list(chunk), include=["metadatas"])
        for id_, meta in zip(got["ids"], got["metadatas"] or [], strict=False):
            found[id_] = str((meta or {}).get(FINGERPRINT_KEY, ""))
    return found


def vector_index(collection: Collection) -> VectorStoreIndex:
    """A LlamaIndex index over the collection, embedding with the offline MiniLM model."""
    from llama_index.core import VectorStoreIndex
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from agent.knowledge.embeddings import llama_embed_model

    return VectorStoreIndex.from_vector_store(ChromaVectorStore(chroma_collection=collection),
                                              embed_model=llama_embed_model())


def upsert(collection: Collection, entries: Sequence[Entry]) -> UpsertCounts:
    """Insert new entries, replace changed ones, leave identical ones alone (no embedding work for them)."""
    counts = UpsertCounts()
    if not entries:
        return counts
    stored = stored_fingerprints(collection, [e.id for e in entries])
    todo: list[tuple[Entry, str]] = []
    for entry in entries:
        fp = entry.fingerprint()
        if entry.id not in stored:
            counts.added += 1
        elif stored[entry.id] != fp:
            counts.updated += 1
        else:
            counts.unchanged += 1
            continue
        todo.append((entry, fp))
    if not todo:
        return counts
    from llama_index.core.schema import TextNode

    index = vector_index(collection)
    changed = [e.id for e, _ in todo if e.id in stored]
    for chunk in _batches(changed):
        collection.delete(ids=list(chunk))
    for chunk in _batches(todo):
        nodes = []
        for entry, fp in chunk:
            metadata: dict[str, Any] = {**entry.metadata, FINGERPRINT_KEY: fp}
            keys = list(metadata)
            nodes.append(TextNode(id_=entry.id, text=entry.text, metadata=metadata,
                                  excluded_embed_metadata_keys=keys, excluded_llm_metadata_keys=keys))
        index.insert_nodes(nodes)
    return counts


def delete_except(collection: Collection, keep: set[str], where: dict[str, Any] | None = None) -> int:
    """Delete the rows (matching `where`, if given) whose id is not in `keep`; returns how many."""
    got = collection.get(where=where, include=[]) if where else collection.get(include=[])
    stale = [id_ for id_ in got["ids"] if id_ not in keep]
    for chunk in _batches(stale):
        collection.delete(ids=list(chunk))
    return len(stale)


_LLAMA_KEYS = ("_node_content", "_node_type", "document_id", "doc_id", "ref_doc_id")  # LlamaIndex's own row keys


def _node_metadata(meta: dict[str, Any] | None) -> dict[str, Any]:
    """The metadata LlamaIndex stored for a node (what its retriever returns as `node.metadata`), read without
    LlamaIndex: the node JSON's `metadata`, else the flat row metadata less LlamaIndex's keys."""
    meta = dict(meta or {})
    content = meta.get("_node_content")
    if isinstance(content, str):
        try:
            node = json.loads(content)
        except ValueError:
            node = None
        if isinstance(node, dict) and isinstance(node.get("metadata"), dict):
            return dict(node["metadata"])
    return {k: v for k, v in meta.items() if k not in _LLAMA_KEYS}


def retrieve(collection: Collection, text: str, k: int, where: dict[str, Any] | None = None) -> list[Hit]:
    """The k entries nearest to `text`, best first, scored by cosine.

    A similarity query over rows that LlamaIndex wrote: the same Chroma query that LlamaIndex's retriever makes
    (query embedding, top k, `where`), read straight from Chroma's client, so a diagnosis neither imports
    LlamaIndex nor builds an index object (seconds of a cold run). Writing stays with LlamaIndex (`upsert`)."""
    total = collection.count()
    if k <= 0 or total == 0 or not text.strip():
        return []
    from agent.knowledge.embeddings import embed

    kwargs: dict[str, Any] = {"where": where} if where else {}
    found = collection.query(query_embeddings=[embed([text])[0].tolist()], n_results=min(k, total),
                             include=["documents", "metadatas", "distances"], **kwargs)
    space = space_of(collection)
    ids = found["ids"][0] if found["ids"] else []
    nothing: list[None] = [None] * len(ids)
    documents: Sequence[str | None] = (found.get("documents") or [[]])[0] or nothing
    metadatas: Sequence[Any] = (found.get("metadatas") or [[]])[0] or nothing
    distances: Sequence[float | None] = (found.get("distances") or [[]])[0] or nothing
    hits = []
    for id_, document, row_meta, distance in zip(ids, documents, metadatas, distances, strict=False):
        cosine = min(1.0, max(0.0, distance_to_cosine(float(distance), space))) if distance is not None else 0.0
        meta = {k_: v for k_, v in _node_metadata(dict(row_meta or {})).items() if k_ != FINGERPRINT_KEY}
        hits.append(Hit(id=str(id_), text=document or "", metadata=meta, score=cosine))
    hits.sort(key=lambda h: h.score, reverse=True)
    return hits
