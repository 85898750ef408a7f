"""Redaction for text that leaves the customer's machine (the escalation ticket): secrets, tokens, e-mail
addresses, IP addresses and host names become placeholders. The same value always maps to the same placeholder
within one ticket, so "<host-1> cannot reach <ip-2>" stays readable."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# Secrets first: they may contain things that look like hosts or IPs. A pattern's `keep` group (the name of
# the parameter) stays; the rest of the match is the secret.
_SECRETS: list[tuple[str, re.Pattern[str]]] = [
    ("private-key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S)),
    ("secret", re.compile(r"\b(?:sk|rk)-(?:proj-)?[A-Za-z0-9_-]{16,}")),  # OpenAI-style keys
    ("secret", re.compile(r"\bhf_[A-Za-z0-9]{20,}")),  # Hugging Face tokens
    ("secret", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}")),  # GitHub tokens
    ("secret", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),  # Slack tokens
    ("secret", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),  # AWS access key ids
    ("secret", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),  # JWTs
    ("secret", re.compile(r"(?i)(?P<keep>\bbearer\s+)[A-Za-z0-9._~+/-]{12,}=*")),
    ("secret", re.compile(r"(?i)(?P<keep>[?&](?:sig|sv|token|key)=)[^&\s\"']{8,}")),  # SAS / signed URLs
    ("secret", re.compile(r"(?i)(?P<keep>\b\w*?(?:password|passwd|pwd|secret|token|api_?key|access_?key|auth|_key)"
                          r"[\"']?\s{0,3}[=:]\s{0,3}[\"']?)[^\s\"',;]{4,}")),
]
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_IPV4 = re.compile(r"(?<![\w.:])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\w.])")
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
    def __init__(self, hostnames: Iterable[str] = ()):
        self.hostnames = sorted({h for h in hostnames if h and h not in ("local", "localhost")}, key=len,
                                reverse=True)
        self.mapping: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def _placeholder(self, kind: str, value: str) -> str:
        if kind in ("secret", "private-key"):
            self.counts[kind] = self.counts.get(kind, 0) + 1
            return f"<{kind}>"
        key = f"{kind}:{value.lower()}"
        if key not in self.mapping:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.mapping[key] = f"<{kind}-{self.counts[kind]}>"
        return self.mapping[key]

    def text(self, value: str) -> str:
        for kind, pattern in _SECRETS:
            value = pattern.sub(lambda m, k=kind: (m.groupdict().get("keep") or "") + self._placeholder(k, ""), value)
        value = _EMAIL.sub(lambda m: self._placeholder("email", m.group(0)), value)
        for name in self.hostnames:
            value = re.sub(rf"(?<![<\w-]){re.escape(name)}(?![\w-])", lambda m: self._placeholder("host", m.group(0)),
                           value)
        value = _IPV4.sub(lambda m: self._placeholder("ip", m.group(0)), value)
        value = _IPV6.sub(lambda m: self._placeholder("ip", m.group(0)), value)
        value = _FQDN.sub(lambda m: self._placeholder("host", m.group(0)), value)
        return _NODE_NAME.sub(lambda m: self._placeholder("host", m.group(0)), value)

    def data(self, value: Any) -> Any:
        """Redact every string inside JSON-like data (dict keys too: hosts key some results)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value
