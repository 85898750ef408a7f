"""Host bundles (what agent/collect/collector.py wrote on a host) and NVIDIA bug reports, read as recordings the
checks replay (verification_scripts/checklib_record.py): `--host bundle:FILE`.

Not agent/bundle.py, which is the evidence bundle a diagnosis keeps of its confirmed causes."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

from agent.collect.bugreport import is_bug_report, parse_bug_report
from agent.collect.recording import HostRecording

FORMAT = "aidai-host-bundle/1"
MAX_MEMBER_BYTES = 512 << 20  # a bundle is a few MB; anything near this is not one


class BundleError(ValueError):
    pass


def load(path: Path) -> HostRecording:
    """An aidai host bundle (tar.gz) or an NVIDIA bug report (nvidia-bug-report.log[.gz])."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BundleError(f"{path}: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            inner = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise BundleError(f"{path}: a broken gzip file ({exc})") from None
        if len(inner) > 262 and inner[257:262] == b"ustar":
            return _from_tar(path, raw)
        raw = inner
    text = raw.decode("utf-8", "replace")
    if is_bug_report(text):
        return parse_bug_report(text, path.name)
    raise BundleError(f"{path}: neither an aidai host bundle (python3 aidai_collect.py > host.tar.gz) nor an "
                      f"nvidia-bug-report.log[.gz]")


def _from_tar(path: Path, raw: bytes) -> HostRecording:
    members: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile() or member.size > MAX_MEMBER_BYTES:
                continue
            handle = tar.extractfile(member)
            if handle is not None:
                members[member.name] = handle.read()
    if "manifest.json" not in members or "recording.json" not in members:
        raise BundleError(f"{path}: a tar.gz without manifest.json and recording.json: not an aidai host bundle")
    manifest = json.loads(members["manifest.json"])
    for entry in manifest.get("members", []):
        data = members.get(entry["name"])
        if data is None:
            raise BundleError(f"{path}: {entry['name']} is listed in the manifest but missing")
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise BundleError(f"{path}: {entry['name']} does not match its sha256 in the manifest (altered or cut)")
    rec = json.loads(members["recording.json"])
    if rec.get("format") != FORMAT:
        raise BundleError(f"{path}: bundle format {rec.get('format')!r}; this aidai reads {FORMAT}")
    results = {name[len("results/"):-len(".json")]: json.loads(data) for name, data in members.items()
               if name.startswith("results/") and name.endswith(".json")}
    return HostRecording(hostname=rec.get("hostname") or path.stem, collected_at=float(rec["collected_at"]),
                         source="aidai bundle", runs=rec.get("runs") or [], files=rec.get("files") or {},
                         exists=rec.get("exists") or {}, listdir=rec.get("listdir") or {},
                         which=rec.get("which") or {}, env=rec.get("env") or {}, euid=rec.get("euid"),
                         results=results, manifest=manifest)
