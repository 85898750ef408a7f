"""The standalone collector: collector.py with its payload (the check scripts, the passive checks to run, the
known-bad versions and aidai's secret rules), one file a customer runs with nothing but python3."""

from __future__ import annotations

import base64
import io
import json
import re
import tarfile
from pathlib import Path
from typing import Any

from agent.checks.manifest import load_known_bad, load_manifest
from agent.paths import SCRIPTS_DIR

TEMPLATE = Path(__file__).with_name("collector.py")
PAYLOAD_LINE = re.compile(r"^PAYLOAD = \{\}.*$", re.M)
# substrings that gate agent/redact_rules.py's keyword rules (its KEYWORD_GATE, as plain needles)
KEYWORD_NEEDLES = ("pass", "pwd", "secret", "token", "key", "credential", "sas", "signature", "contrase", "_id",
                   "login", "crumb")


def scripts_archive() -> str:
    """Every script and data file the checks import or read, as base64 tar.gz (flat)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(SCRIPTS_DIR.iterdir()):
            if path.is_file() and path.suffix in (".py", ".csv"):
                info = tarfile.TarInfo(path.name)
                data = path.read_bytes()
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def secret_rules() -> list[tuple[str, str, int, tuple[str, ...]]]:
    """agent/redact_rules.py's own secret patterns (stdlib `re`), so the host redacts as aidai does; detect-secrets'
    plugins and the name rules run again when aidai reads the bundle."""
    from agent import redact_rules

    rules = [(kind, p.pattern, p.flags, needles)
             for kind, p, needles in [*redact_rules.BLOCK_SECRETS, *redact_rules.SECRETS]]
    rules += [(kind, p.pattern, p.flags, KEYWORD_NEEDLES) for kind, p in redact_rules.KEYWORD_RULES]
    return rules


def payload() -> dict[str, Any]:
    checks = [{"id": c.id, "script": c.script, "timeout_s": c.timeout_s} for c in load_manifest().checks
              if c.tier == "passive"]
    return {"scripts": scripts_archive(), "checks": checks, "known_bad": load_known_bad(),
            "secret_rules": secret_rules()}


def build_script(path: Path) -> Path:
    """Write the standalone collector to `path` (executable)."""
    data = base64.b64encode(json.dumps(payload()).encode("utf-8")).decode("ascii")
    line = f'PAYLOAD = json.loads(base64.b64decode("{data}").decode("utf-8"))'
    source = PAYLOAD_LINE.sub(lambda _: line, TEMPLATE.read_text(encoding="utf-8"), count=1)
    path.write_text(source, encoding="utf-8")
    path.chmod(0o755)
    return path
