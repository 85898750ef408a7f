"""The evidence bundle of a run: what the checks that confirmed each cause saw, kept whole and hashed before anyone
acts on the report (a GPU reset or a reboot wipes the counters and the kernel log the diagnosis read).

While a run executes, every check's whole output (the script's stdout: its evidence object, with each command's
stdout and stderr and each file it read, `raw_outputs`) is spooled to `<runs>/<run>.spool/`; its sha256 is the
`output_sha256` the audit log already holds for that check. When the run concludes with confirmed causes,
`write_bundle` keeps the confirming results in `<runs>/<run>.evidence/`:

    manifest.json                      causes, per result: host, check, verdict, findings, commands, time, the
                                       host's tool versions, and every file below with its sha256
    NN-<host>-<check>/evidence.json    the script's stdout, byte for byte (sha256 = the result's output_sha256)
    NN-<host>-<check>/cmd-MM.stdout    each command's stdout (and .stderr), whole up to the cap
    NN-<host>-<check>/file-MM.txt      each file the check read

The manifest's own sha256 goes into the audit log, so changing any file (or the manifest) is detectable
(`check_bundle`). The directory is built under a temporary name and renamed into place (0700, files 0600, fsynced),
then the spool is removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agent.checks.manifest import LIB_SCRIPTS, Manifest
from agent.checks.runner import RAW_LIMIT_CHARS
from agent.inventory import HostInventory, HostView
from agent.models import CheckResult

FORMAT = "aidai-evidence/1"
MANIFEST = "manifest.json"
# an evidence entry (agent/evidence.py), optionally followed by ": the finding's message" as the report prints it
ENTRY = re.compile(r"^(?P<check>[^:]+):(?P<finding>[^@]*)@(?P<entity>.*?) \((?P<severity>FAIL|WARN)\)(?:: .*)?$", re.S)


class BundleError(ValueError):
    """A bundle that cannot be read (missing, not a manifest)."""


class ConfirmingFinding(BaseModel):
    """One evidence entry of a confirmed cause, `check:finding@entity (SEVERITY)`, and the result it came from."""

    check: str
    finding: str
    entity: str
    severity: str
    host: str


class BundledCause(BaseModel):
    label: str
    role: str  # root_cause | follows (what followed from a cause on its device) | also_found
    confidence: float = 0.0
    evidence: list[str] = Field(default_factory=list)
    findings: list[ConfirmingFinding] = Field(default_factory=list)


class BundleInfo(BaseModel):
    """What the report, the ticket and the audit log say about the bundle."""

    path: str = ""
    manifest_sha256: str = ""
    results: int = 0
    files: int = 0
    bytes: int = 0
    capped: list[str] = Field(default_factory=list)  # "host check": output past the cap was cut
    not_kept: list[str] = Field(default_factory=list)  # "host check: why" the whole output is missing
    error: str = ""  # why no bundle could be written


# ---- naming and writing -------------------------------------------------------------------------------------
def slug(host: str) -> str:
    """A file-name-safe form of a host name (ssh://user@node:22 → ssh-user-node-22), unique by a short hash."""
    plain = re.sub(r"[^A-Za-z0-9._-]+", "-", host).strip("-.")[:60] or "host"
    return f"{plain}-{hashlib.sha256(host.encode()).hexdigest()[:6]}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)


# ---- the spool: every executed check's whole output, while the run goes on ----------------------------------
class Spool:
    """`<runs>/<run>.spool/`: the runner's raw sink. A write that fails is remembered, never raised: losing the
    whole output must not lose the diagnosis (the bundle then says which output is missing and why)."""

    def __init__(self, path: Path):
        self.path = path
        self.problems: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def file(self, host: str, check: str) -> Path:
        return self.path / f"{slug(host)}--{check}.json"

    def __call__(self, host: str, check: str, stdout: str) -> None:
        target = self.file(host, check)
        try:
            with self._lock:
                _private_dir(self.path)
            tmp = target.with_name(f".{target.name}.{threading.get_ident()}.tmp")
            _write_private(tmp, stdout.encode("utf-8"))
            os.replace(tmp, target)
            self.problems.pop((host, check), None)
        except OSError as exc:
            self.problems[(host, check)] = f"the whole output could not be spooled: {exc}"

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


# ---- which results confirmed which cause --------------------------------------------------------------------
def confirming(entries: list[str], results: list[CheckResult]) -> list[ConfirmingFinding]:
    """The (host, check, finding) behind each evidence entry of a cause (`check:finding@entity (SEVERITY)`, the
    entity being the finding's, or the host when the finding names none)."""
    out = []
    for entry in entries:
        match = ENTRY.match(entry)
        if not match:
            continue
        check, finding, entity = match["check"], match["finding"], match["entity"]
        # every host that has it: the entry names the entity, and two hosts' GPU5 make one entry
        out += [ConfirmingFinding(check=check, finding=finding, entity=entity, severity=match["severity"],
                                  host=result.host)
                for result in results
                if result.check == check and any(f.id == finding and (f.entity or result.host) == entity
                                                 for f in result.findings)]
    return out


def tool_versions(inventory: dict[str, HostView], results: list[CheckResult], host: str) -> dict[str, Any]:
    """What the run knows of the host's software: the inventory's driver and CUDA, the framework versions check's
    metrics (torch, NCCL, CUDA runtime, nvcc), and which tools the inventory found."""
    view = inventory.get(host)
    saved = view.inventory if view else HostInventory(host=host, platform="")
    known: dict[str, Any] = {"hostname": saved.hostname, "driver": saved.driver_version,
                             "cuda": saved.cuda_version, "platform": saved.platform or None}
    framework = next((r for r in results if r.host == host and r.check == "framework_versions"), None)
    if framework is not None:
        known.update({k: v for k, v in framework.metrics.items() if isinstance(v, str | int | float) and v != ""})
    known["tools"] = saved.tools
    return known


def aidai_version() -> str:
    try:
        return version("aidai")
    except PackageNotFoundError:
        return "unknown"


# ---- the bundle -----------------------------------------------------------------------------------------------
def bundle_path(runs: Path, run_id: str) -> Path:
    return runs / f"{run_id}.evidence"


def write_bundle(runs: Path, run_id: str, causes: list[BundledCause], results: list[CheckResult],
                 inventory: dict[str, HostView], manifest: Manifest, spool: Spool,
                 exit_codes: dict[tuple[str, str], int | None] | None = None) -> BundleInfo:
    """The bundle of the results that confirmed `causes`, written atomically; the spool is removed after."""
    final = bundle_path(runs, run_id)
    work = runs / f".{run_id}.evidence.{os.getpid()}.tmp"
    shutil.rmtree(work, ignore_errors=True)
    _private_dir(work)
    wanted = list(dict.fromkeys((f.host, f.check) for cause in causes for f in cause.findings))
    by_key = {(r.host, r.check): r for r in results}
    info = BundleInfo(path=str(final))
    entries = []
    try:
        for n, (host, check) in enumerate(wanted, 1):
            result = by_key.get((host, check))
            if result is None:
                continue
            folder = f"{n:02d}-{slug(host)}-{check}"
            _private_dir(work / folder)
            entry, files = _bundle_result(work / folder, folder, result, spool, manifest,
                                          (exit_codes or {}).get((host, check)))
            entry["tool_versions"] = tool_versions(inventory, results, host)
            entries.append(entry)
            info.files += len(files)
            info.bytes += sum(f["bytes"] for f in files)
            if entry["raw"]["capped"]:
                info.capped.append(f"{host} {check}")
            if not entry["raw"]["kept"]:
                info.not_kept.append(f"{host} {check}: {entry['raw']['why']}")
        document = {
            "format": FORMAT, "run_id": run_id, "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "aidai_version": aidai_version(), "raw_limit_chars": RAW_LIMIT_CHARS,
            "causes": [c.model_dump(mode="json") for c in causes], "results": entries,
        }
        data = (json.dumps(document, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
        _write_private(work / MANIFEST, data)
        _fsync_dir(work)
        old = runs / f".{run_id}.evidence.{os.getpid()}.old"
        if final.exists():  # a conclusion run again after a crash: the new bundle replaces the old one whole
            os.replace(final, old)
        os.replace(work, final)
        _fsync_dir(runs)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    spool.remove()
    info.results = len(entries)
    info.manifest_sha256 = hashlib.sha256(data).hexdigest()
    return info


def _bundle_result(folder: Path, name: str, result: CheckResult, spool: Spool, manifest: Manifest,
                   exit_code: int | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One result's files (its whole output from the spool, split per command and file) and its manifest entry."""
    spec = next((s for s in manifest.checks if s.id == result.check), None)
    scripts = [spec.script_path, *(spec.script_path.parent / lib for lib in LIB_SCRIPTS)] if spec else []
    entry: dict[str, Any] = {
        "host": result.host, "check": result.check, "tier": result.tier, "verdict": result.verdict.value,
        "summary": result.summary, "findings": [f.model_dump(mode="json") for f in result.findings],
        "commands": result.cmds, "duration_s": result.duration_s, "exit_code": exit_code,
        "output_sha256": result.output_sha256, "folder": name,
        "scripts": {p.name: sha256_file(p) for p in scripts if p.is_file()},
    }
    files: list[dict[str, Any]] = []

    def keep(file_name: str, text: str, what: str) -> None:
        data = text.encode("utf-8")
        _write_private(folder / file_name, data)
        files.append({"name": f"{name}/{file_name}", "sha256": hashlib.sha256(data).hexdigest(),
                      "bytes": len(data), "what": what})

    source = spool.file(result.host, result.check)
    stdout = source.read_text(encoding="utf-8") if source.is_file() else None
    if stdout is None:
        why = spool.problems.get((result.host, result.check)) or "no whole output was spooled for this check"
        entry["raw"] = {"kept": False, "capped": False, "why": why}
        keep("excerpt.txt", result.raw_excerpt, "the excerpt the checkpoint keeps (the whole output is missing)")
    elif hashlib.sha256(stdout.encode("utf-8")).hexdigest() != result.output_sha256:
        entry["raw"] = {"kept": False, "capped": False,
                        "why": "the spooled output is not this result's (its sha256 differs): another execution"}
        keep("excerpt.txt", result.raw_excerpt, "the excerpt the checkpoint keeps (the whole output is missing)")
    else:
        keep("evidence.json", stdout, "the script's stdout, byte for byte (its sha256 is the result's output_sha256)")
        capped = _split_outputs(stdout, keep)
        entry["raw"] = {"kept": True, "capped": capped, "why": "output past the cap was cut" if capped else ""}
    entry["files"] = files
    return entry, files


def _split_outputs(stdout: str, keep: Any) -> bool:
    """Each command's stdout/stderr and each file read as its own file; True when the script cut any of it."""
    lines = [line for line in stdout.splitlines() if line.strip().startswith("{")]
    try:
        evidence = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        return False
    if not isinstance(evidence, dict):
        return False
    for m, item in enumerate(evidence.get("raw_outputs") or [], 1):
        if not isinstance(item, dict):
            continue
        cut = " (cut at the cap)" if item.get("truncated") else ""
        if "cmd" in item:
            state = ("not installed" if item.get("missing") else "timed out" if item.get("timed_out")
                     else f"exit {item.get('rc')}")
            keep(f"cmd-{m:02d}.stdout", str(item.get("stdout") or ""), f"stdout of `{item['cmd']}` ({state}){cut}")
            if item.get("stderr"):
                keep(f"cmd-{m:02d}.stderr", str(item["stderr"]), f"stderr of `{item['cmd']}`{cut}")
        elif "file" in item:
            keep(f"file-{m:02d}.txt", str(item.get("text") or ""), f"file {item['file']}{cut}")
    return bool(evidence.get("raw_capped"))


# ---- reading it back -------------------------------------------------------------------------------------------
def load_bundle(path: Path) -> dict[str, Any]:
    manifest = path / MANIFEST
    if not manifest.is_file():
        raise BundleError(f"no evidence bundle at {path}")
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"{manifest}: not a bundle manifest ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BundleError(f"{manifest}: not an {FORMAT} manifest")
    return data


def check_bundle(path: Path, manifest_sha256: str) -> list[str]:
    """What differs from what was recorded: the manifest's hash against the audit log's, every file's against the
    manifest's. Empty: the bundle is as it was written."""
    try:
        data = load_bundle(path)
    except BundleError as exc:
        return [str(exc)]
    problems = []
    if manifest_sha256 and sha256_file(path / MANIFEST) != manifest_sha256:
        problems.append(f"{MANIFEST} changed: its sha256 is not the one the audit log recorded")
    for result in data.get("results", []):
        for item in result.get("files", []):
            file = path / item["name"]
            if not file.is_file():
                problems.append(f"{item['name']} is missing")
            elif sha256_file(file) != item["sha256"]:
                problems.append(f"{item['name']} changed: its sha256 is not the manifest's")
    return problems
