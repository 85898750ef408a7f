"""Reversible redaction of what leaves the customer's machine (every LLM prompt, the escalation ticket): secrets,
tokens, e-mail addresses, user names, home/data paths, IP addresses and host names become numbered placeholders.
The same value always maps to the same placeholder within one run, so "<host-1> cannot reach <ip-2>" stays
readable, and the model's answers can be restored for the local report. The mapping (placeholder -> original)
is saved next to the run with 0600 permissions and never leaves the machine."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# Secrets first: they may contain things that look like hosts or IPs. A pattern's `keep` group (the name of
# the parameter) stays; the rest of the match is the secret.
_SECRETS: list[tuple[str, re.Pattern[str]]] = [
    # to its END line, or to the end of the text when a prompt budget cut the END line off
    ("private-key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S)),
    ("secret", re.compile(r"\b(?:sk|rk)-(?:proj-)?[A-Za-z0-9_-]{16,}")),  # OpenAI-style keys
    ("secret", re.compile(r"\bhf_[A-Za-z0-9]{20,}")),  # Hugging Face tokens
    ("secret", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}")),  # GitHub tokens
    ("secret", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),  # Slack tokens
    ("secret", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),  # AWS access key ids
    ("secret", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),  # JWTs
    ("secret", re.compile(r"(?P<keep>\b[a-zA-Z][\w+.-]*://[^/\s:@]+:)[^@\s/]+(?=@)")),  # scheme://user:PASSWORD@
    ("secret", re.compile(r"(?i)(?P<keep>\bbearer\s+)[A-Za-z0-9._~+/-]{12,}=*")),
    ("secret", re.compile(r"(?i)(?P<keep>[?&](?:sig|sv|token|key)=)[^&\s\"']{8,}")),  # SAS / signed URLs
    ("secret", re.compile(r"(?i)(?P<keep>\b\w*?(?:password|passwd|pwd|secret|token|api_?key|access_?key|auth|_key)"
                          r"[\"']?\s{0,3}[=:]\s{0,3}[\"']?)[^\s\"',;]{4,}")),
]
_PATH = re.compile(r"(?<![\w<>/.~-])(?:~[\w.-]*|/(?:home|Users|root|mnt|data|scratch|workspace|nfs|gpfs|lustre|"
                   r"datasets?|checkpoints?))(?:/[^\s\"'`,;:()\[\]{}<>|]+)+")
_USER_AT = re.compile(r"(?<![\w.+%<-])[A-Za-z_][A-Za-z0-9_.-]{0,31}(?=@[A-Za-z0-9<])")  # alice@host (ssh, scp)
_USER_KV = re.compile(r"(?i)(?P<keep>\b(?:user(?:name)?|login|owner|account)\s{0,3}[=:]\s{0,3}[\"']?)"
                      r"(?!<)[A-Za-z_][\w.-]{1,31}")
_URL_USER = re.compile(r"(?<=://)(?!<)[^/\s:@]+(?=:<secret-\d+>@|@)")  # the user of scheme://user[:secret]@host
_PLACEHOLDER = re.compile(r"<(?:secret|private-key|email|path|user|host|ip)-\d+>")
# names that are too common as words to replace wherever they appear (they are still caught as user@ or user=)
COMMON_USERS = frozenset({"root", "user", "admin", "ubuntu", "nobody", "runner", "default", "guest", "test"})
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_IPV4 = re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\w.])")
# IPv6 needs a "::" or seven colons, so PCI bus ids (0000:5d:00.0) and times (12:30:01) are left alone
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}(?![\w:])"
                   r"|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4}){0,5})?(?![\w:.])"
                   r"|(?<![\w:])::(?:[0-9A-Fa-f]{1,4}:){0,5}[0-9A-Fa-f]{1,4}(?![\w:.])")
_FQDN = re.compile(r"(?i)\b(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+(?:com|net|org|io|ai|cloud|dev|internal|local|"
                   r"lan|corp|cluster|svc|intra|azure|amazonaws|googleapis|cn|de|uk|fr|jp)\b")
# host names the way clusters name nodes (gpu-a17, node-12, worker3, ip-10-0-0-7) when written as such
# (a hyphen is required: gpu0 / GPU5 are devices; GPU UUIDs stay for the provider; "<" skips placeholders)
_NODE_NAME = re.compile(r"(?i)(?<![<\w-])(?!gpu-[0-9a-f]{8}-)(?:ip-\d+-\d+-\d+-\d+|"
                        r"(?:gpu|node|worker|compute|host|vm|dgx|hgx)-[a-z0-9-]*\d[a-z0-9-]*)\b")


class Redactor:
    """One per run: `text`/`data` redact, `restore`/`restore_data` undo it with the mapping this instance holds."""

    def __init__(self, hostnames: Iterable[str] = (), usernames: Iterable[str] = ()):
        self.hostnames = sorted({h for h in hostnames if h and h not in ("local", "localhost")}, key=len,
                                reverse=True)
        self.usernames = sorted({u for u in usernames if u and u.lower() not in COMMON_USERS}, key=len, reverse=True)
        self.mapping: dict[str, str] = {}  # "kind:value" (lower case) -> placeholder
        self.originals: dict[str, str] = {}  # placeholder -> the value as first seen
        self.counts: dict[str, int] = {}  # distinct values redacted per kind

    def _placeholder(self, kind: str, value: str) -> str:
        if _PLACEHOLDER.search(value):  # already redacted by an earlier pattern: never a placeholder of a placeholder
            return value
        key = f"{kind}:{value.lower()}"
        if key not in self.mapping:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.mapping[key] = f"<{kind}-{self.counts[kind]}>"
            self.originals[self.mapping[key]] = value
        return self.mapping[key]

    def _secret(self, kind: str, match: re.Match[str]) -> str:
        keep = match.groupdict().get("keep") or ""
        return keep + self._placeholder(kind, match.group(0)[len(keep):])

    def _words(self, names: list[str], kind: str, value: str) -> str:
        for name in names:
            value = re.sub(rf"(?<![<\w-]){re.escape(name)}(?![\w-])", lambda m: self._placeholder(kind, m.group(0)),
                           value)
        return value

    def text(self, value: str) -> str:
        for kind, pattern in _SECRETS:
            value = pattern.sub(lambda m, k=kind: self._secret(k, m), value)
        value = _EMAIL.sub(lambda m: self._placeholder("email", m.group(0)), value)
        value = _PATH.sub(lambda m: self._placeholder("path", m.group(0)), value)
        value = _URL_USER.sub(lambda m: self._placeholder("user", m.group(0)), value)
        value = _USER_AT.sub(lambda m: self._placeholder("user", m.group(0)), value)
        value = _USER_KV.sub(lambda m: self._secret("user", m), value)
        value = self._words(self.usernames, "user", value)
        value = self._words(self.hostnames, "host", value)
        value = _IPV4.sub(lambda m: self._placeholder("ip", m.group(0)), value)
        value = _IPV6.sub(lambda m: self._placeholder("ip", m.group(0)), value)
        value = _FQDN.sub(lambda m: self._placeholder("host", m.group(0)), value)
        return _NODE_NAME.sub(lambda m: self._placeholder("host", m.group(0)), value)

    def data(self, value: Any) -> Any:
        """Redact every string inside JSON-like data (dict keys too: hosts key some results)."""
        return _walk(value, self.text)

    def restore(self, value: str) -> str:
        """Placeholders this redactor made back to their values; any other text (an invented <host-99>) stays."""
        return _PLACEHOLDER.sub(lambda m: self.originals.get(m.group(0), m.group(0)), value)

    def restore_data(self, value: Any) -> Any:
        return _walk(value, self.restore)

    # ---- the local mapping file ---------------------------------------------------------------------------
    def save(self, path: Path) -> Path:
        """Write the mapping atomically, readable by the owner only (0600): a crash leaves the old file whole."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, json.dumps({"version": 1, "originals": self.originals}, indent=1).encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        return path

    def load(self, path: Path) -> Redactor:
        """Continue a run's mapping (a resumed run keeps its placeholders); a missing file is an empty mapping."""
        if not path.is_file():
            return self
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
            originals = dict(saved["originals"])
        except (ValueError, KeyError, TypeError) as exc:
            raise RedactionMappingError(f"{path}: not a redaction mapping ({exc}); move it away to start a new "
                                        "one") from None
        for placeholder, value in originals.items():
            match = re.fullmatch(r"<([a-z-]+)-(\d+)>", placeholder)
            if match is None:
                raise RedactionMappingError(f"{path}: bad placeholder {placeholder!r}")
            kind, number = match.group(1), int(match.group(2))
            self.originals[placeholder] = value
            self.mapping[f"{kind}:{value.lower()}"] = placeholder
            self.counts[kind] = max(self.counts.get(kind, 0), number)
        return self


class RedactionMappingError(ValueError):
    pass


def _walk(value: Any, fn: Any) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {fn(k) if isinstance(k, str) else k: _walk(v, fn) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, fn) for v in value]
    return value
