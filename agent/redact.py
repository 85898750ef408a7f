"""Reversible redaction of what leaves the customer's machine (every LLM prompt, the escalation ticket): secrets,
tokens, e-mail addresses, user names, home/data paths, IP addresses and host names become numbered placeholders.
The same value always maps to the same placeholder within one run, so "<host-1> cannot reach <ip-2>" stays
readable, and the model's answers can be restored for the local report. The mapping (placeholder -> original)
is saved next to the run with 0600 permissions and never leaves the machine.

Secrets are found by Yelp's detect-secrets (its vendor-key plugins, its keyword detector and its base64
high-entropy detector) plus our own rules for what it lacks (cloud keys it does not know, passwords in curl/.netrc/
connection strings, auth headers, host names where logs put them). Structured evidence (check and finding ids,
device names, versions, PCI ids, GPU UUIDs, taxonomy labels, source-code paths) is never redacted: a user, host, IP
or path match that lies inside such an id stays as it is.

Speed: each rule runs only on the lines that hold one of its needles (plain substrings, searched in the lower-cased
text), and a text that repeats lines (a log) is redacted one distinct line at a time."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from functools import cache, partial
from pathlib import Path
from typing import Any

from detect_secrets.plugins.base import BasePlugin
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
from detect_secrets.plugins.keyword import (
    CONFIG_DENYLIST_REGEX_TO_GROUP,
    DENYLIST_REGEX,
    QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP,
    KeywordDetector,
)

from agent.redact_rules import (
    AT_GATE,
    AT_HOST,
    BLOCK_SECRETS,
    COMMON_USERS,
    EMAIL,
    EVIDENCE,
    FQDN,
    HOST_KV,
    HOST_KV_GATE,
    IPV4,
    IPV6,
    IPV6_IFACE,
    KEYWORD_GATE,
    KEYWORD_RULES,
    LINE_HOST,
    NAMED_HOSTS,
    NODE_NAME,
    PATH,
    PATH_GATE,
    PLACEHOLDER,
    POD,
    POD_HINT,
    RANDOM_GATE,
    RANDOM_TOKENS,
    SECRET_GATES,
    SECRETS,
    TOKEN_EDGE,
    URL_USER,
    USER_AT,
    USER_KV,
    USER_KV_GATE,
    is_public_host,
)


@cache
def _check_ids() -> frozenset[str]:
    """The verification checks' ids (framework_versions, xid_scan, ...): evidence wherever they appear."""
    try:
        from agent.checks.manifest import load_manifest

        return frozenset(load_manifest().ids())
    except Exception:  # the manifest is optional for redaction: the patterns above still hold
        return frozenset()


@cache
def _check_id_pattern() -> re.Pattern[str] | None:
    ids = sorted(_check_ids(), key=len, reverse=True)
    return re.compile(r"\b(?:" + "|".join(map(re.escape, ids)) + r")\b") if ids else None


def _inside_evidence(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] lies inside one structured-evidence id of the token around it."""
    lo, hi = start, end
    while lo > 0 and text[lo - 1] not in TOKEN_EDGE:
        lo -= 1
    while hi < len(text) and text[hi] not in TOKEN_EDGE:
        hi += 1
    token = text[lo:hi]
    ids = _check_id_pattern()
    spans = [m.span() for m in EVIDENCE.finditer(token)] + ([m.span() for m in ids.finditer(token)] if ids else [])
    return any(a <= start - lo and end - lo <= b for a, b in spans)


def is_evidence(value: str) -> bool:
    """Whether `value` as a whole is structured evidence (a check/finding id, a device, a version, ...)."""
    return value in _check_ids() or EVIDENCE.fullmatch(value) is not None


# ---- secrets: detect-secrets --------------------------------------------------------------------------------
@cache
def _plugins() -> list[BasePlugin]:
    """detect-secrets' vendor-key plugins (each runs only when _GATED lets it). IPs are ours; private keys, JWTs and
    keywords get their own passes."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    skip = {"IPPublicDetector", "PrivateKeyDetector", "JwtTokenDetector", "KeywordDetector"}
    classes: list[type[BasePlugin]] = list(get_mapping_from_secret_type_to_class().values())
    return [plugin() for plugin in classes if issubclass(plugin, RegexBasedDetector) and plugin.__name__ not in skip]


_GATED: dict[str, tuple[str, ...] | re.Pattern[str]] = {  # a plugin runs only when one of these is in the lower-cased
    # text (or the pattern is found in the text): most of them look for an assignment or a literal prefix
    "CloudantDetector": ("cloudant",), "IbmCloudIamDetector": ("apikey", "api_key", "api-key"),
    "IbmCosHmacDetector": ("secret",), "TelegramBotTokenDetector": re.compile(r"\d{8}:"),
    "SoftlayerDetector": ("softlayer",), "AWSKeyDetector": ("aws", "a3t", "akia", "asia", "abia", "acca"),
    "AzureStorageKeyDetector": ("accountkey",), "BasicAuthDetector": ("://",),
    "GitLabTokenDetector": ("gl", "gr1348941"),
    "GitHubTokenDetector": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), "MailchimpDetector": ("-us",),
    "NpmDetector": ("_authtoken",), "OpenAIDetector": ("t3blbkfj",), "PypiTokenDetector": ("pypi-",),
    "SendGridDetector": ("sg.",), "SlackDetector": ("xox", "hooks.slack"), "SquareOAuthDetector": ("sq0csp-",),
    "StripeDetector": ("k_live_",), "ArtifactoryDetector": re.compile(r"AKC|AP[\dA-F]"),
    "TwilioKeyDetector": re.compile(r"AC|SK"),
}
_DENYLISTED = re.compile(DENYLIST_REGEX)
_CONFIG_LINE = re.compile(r"\s*[\w.-]+\s*[:=]")  # key: value on a line of its own: the value is the rest
_QUOTED = re.compile(r"([\"'])([A-Za-z0-9+/=_-]{20,})\1")
_ENTROPY = Base64HighEntropyString(limit=4.5)  # detect-secrets' default limit for base64 strings
_TOKEN_ENTROPY = 3.5  # the vendor-looking token rule: a prefix and 20+ characters of at least this entropy
_NOT_SECRETS = frozenset({"true", "false", "none", "null", "yes", "no", "required", "optional", "redacted",
                          "hidden", "masked", "changeme", "example", "string", "undefined", "empty", "unset",
                          "skipped", "disabled", "enabled", "missing", "invalid", "expired", "denied", "failed",
                          "passed", "unknown", "default", "found", "present", "absent", "n/a"})


def _plausible(value: str) -> bool:
    """A detected value that is worth a placeholder: not a placeholder, variable, number, word or evidence."""
    value = value.strip("\"'` ")
    return (len(value) >= 4 and value.lower() not in _NOT_SECRETS and not PLACEHOLDER.search(value)
            and not re.fullmatch(r"[\d.:,_-]+|\*+|x+|\$\{?\w+\}?|%\w+%|\{\{.*\}\}", value, re.I)
            and not value.startswith(("${", "$(", "<", "{{")) and not is_evidence(value))


def _lines(text: str, gate: re.Pattern[str]) -> Iterator[tuple[int, int]]:
    """The (start, end) of each line of `text` in whose lower case `gate` (a lower-case pattern) finds something:
    a fast search, where a case-insensitive pattern is slow in Python."""
    lowered = text.lower()
    if len(lowered) != len(text):  # a character whose lower case is longer: search case-insensitively instead
        lowered, gate = text, re.compile(gate.pattern, re.I)
    end = -1
    for match in gate.finditer(lowered):
        if match.start() <= end:
            continue
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        end = len(text) if end < 0 else end
        yield start, end


def library_secrets(text: str) -> set[str]:
    """The secret values detect-secrets finds in `text`: vendor keys anywhere, keyword assignments on the lines
    that name a keyword, quoted base64 strings above its entropy limit."""
    found: set[str] = set()
    lowered = text.lower()
    for plugin in _plugins():
        gate = _GATED.get(type(plugin).__name__)
        if (gate is None or (gate.search(text) is not None if isinstance(gate, re.Pattern)
                             else any(needle in lowered for needle in gate))):
            found.update(str(v).strip() for v in plugin.analyze_string(text))
    keyword = KeywordDetector()
    for line in {text[start:end] for start, end in _lines(text, _DENYLISTED)}:
        for groups in (CONFIG_DENYLIST_REGEX_TO_GROUP, QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP):
            for value in keyword.analyze_string(line, denylist_regex_to_group=groups):
                # an unquoted value runs to the end of the line in detect-secrets: a log's value is one token
                quoted = f"'{value}'" in line or f'"{value}"' in line or f"`{value}`" in line
                found.add(value if quoted or _CONFIG_LINE.match(line) else value.split()[0] if value.split()
                          else value)
    for _, value in _QUOTED.findall(text):
        if _ENTROPY.calculate_shannon_entropy(value) > _ENTROPY.entropy_limit:
            found.add(value)
    return {v for v in found if _plausible(v)}


class Redactor:
    """One per run: `text`/`data` redact, `restore`/`restore_data` undo it with the mapping this instance holds."""

    def __init__(self, hostnames: Iterable[str] = (), usernames: Iterable[str] = ()):
        self.hostnames = sorted({h for h in hostnames if h and h not in ("local", "localhost")}, key=len,
                                reverse=True)
        self.usernames = sorted({u for u in usernames if u and u.lower() not in COMMON_USERS}, key=len, reverse=True)
        self.mapping: dict[str, str] = {}  # _key(kind, value) -> placeholder
        self.originals: dict[str, str] = {}  # placeholder -> the value as first seen
        self.counts: dict[str, int] = {}  # distinct values redacted per kind

    def _placeholder(self, kind: str, value: str) -> str:
        if PLACEHOLDER.search(value):  # already redacted by an earlier pattern: never a placeholder of a placeholder
            return value
        key = _key(kind, value)
        if key not in self.mapping:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.mapping[key] = f"<{kind}-{self.counts[kind]}>"
            self.originals[self.mapping[key]] = value
        return self.mapping[key]

    def _secret(self, kind: str, match: re.Match[str]) -> str:
        if match.groupdict().get("v") is not None:  # the secret is a group inside the match ("value" == password)
            start, end = match.span("v")
            whole, at = match.group(0), match.start()
            if not _plausible(match.group("v")):
                return whole
            return whole[:start - at] + self._placeholder(kind, match.group("v")) + whole[end - at:]
        keep = match.groupdict().get("keep") or ""
        value = match.group(0)[len(keep):]
        if not _plausible(value) and kind == "secret" and keep:  # password=${PASSWORD}, token=<secret-1>, key=GPU3
            return match.group(0)
        if kind in ("user", "host") and _inside_evidence(match.string, match.start() + len(keep), match.end()):
            return match.group(0)
        return keep + self._placeholder(kind, value)

    def _secret_sub(self, kind: str, pattern: re.Pattern[str], line: str) -> str:
        return pattern.sub(partial(self._secret, kind), line)

    def _keywords(self, line: str) -> str:
        for kind, pattern in KEYWORD_RULES:
            line = pattern.sub(partial(self._secret, kind), line)
        return line

    @staticmethod
    def _on_lines(value: str, gate: re.Pattern[str], fn: Callable[[str], str]) -> str:
        """`fn` applied to each line that `gate` finds something in (a line seen before gives the same result)."""
        out: list[str] = []
        done: dict[str, str] = {}
        at = 0
        for start, end in _lines(value, gate):
            line = value[start:end]
            if line not in done:
                done[line] = fn(line)
            out += [value[at:start], done[line]]
            at = end
        return "".join([*out, value[at:]])

    def _random_token(self, match: re.Match[str]) -> str:
        value = match.group(0)
        body = re.split(r"[_.-]", value)[-1]
        limit = _TOKEN_ENTROPY if len(body) < len(value) else _ENTROPY.entropy_limit
        if (is_evidence(value) or _ENTROPY.calculate_shannon_entropy(body) < limit
                or re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", body)):  # a commit or a sha256: container ids, digests
            return value
        return self._placeholder("secret", value)

    def _words(self, names: Iterable[str], kind: str, value: str) -> str:
        names = sorted(set(names), key=len, reverse=True)
        if not names:
            return value
        # host names are case-insensitive (DNS): a node printed "H100-Node-B7" in one line and "h100-node-b7" in the
        # next is one host; user names are not
        flags = re.IGNORECASE if kind == "host" else 0
        pattern = re.compile(r"(?<![<\w-])(?:" + "|".join(map(re.escape, names)) + r")(?![\w-])", flags)
        return pattern.sub(lambda m: self._placeholder(kind, m.group(0)), value)

    # ---- the passes ------------------------------------------------------------------------------------------
    def _log_hosts(self, value: str) -> set[str]:
        """Host names in the places logs put them (syslog/journal host field, NCCL prefix, pod=...)."""
        hosts = set()
        for line in value.split("\n"):
            match = LINE_HOST.match(line)
            if match is not None:
                hosts.add(match.group(match.lastgroup or 0))
        for gate, pattern in NAMED_HOSTS:
            for start, end in _lines(value, gate):
                hosts.update(m.group(m.lastgroup or 0) for m in pattern.finditer(value, start, end))
        for hint in POD_HINT.finditer(value):
            lo = max(value.rfind(c, 0, hint.start()) for c in " \t\n/\"'=(") + 1
            pod = POD.match(value, lo, hint.end())
            if pod is not None and pod.end() == hint.end():
                hosts.add(pod.group(0))
        return {h for h in hosts if h and not PLACEHOLDER.search(h)
                and h not in ("localhost", "kernel") and not is_evidence(h) and re.search(r"[A-Za-z]", h)}

    def text(self, value: str) -> str:
        lowered = value.lower()
        for kind, pattern, needles in BLOCK_SECRETS:  # those that may span lines first
            if any(needle in lowered for needle in needles):
                value = pattern.sub(partial(self._secret, kind), value)
        lines = value.split("\n")
        distinct = list(dict.fromkeys(lines))
        if len(distinct) < len(lines):  # a log repeats lines: redact each distinct line once, in order of appearance
            done = self._redact("\n".join(distinct)).split("\n")
            if len(done) == len(distinct):  # (no rule matched across lines; the numbering is the same either way)
                table = dict(zip(distinct, done, strict=True))
                return "\n".join(table[line] for line in lines)
        return self._redact(value)

    def _redact(self, value: str) -> str:
        lowered = value.lower()
        for (kind, pattern, needles), gate in zip(SECRETS, SECRET_GATES, strict=True):
            if any(needle in lowered for needle in needles):
                value = self._on_lines(value, gate, partial(self._secret_sub, kind, pattern))
        value = self._on_lines(value, KEYWORD_GATE, self._keywords)
        value = self._on_lines(value, RANDOM_GATE, lambda line: RANDOM_TOKENS.sub(self._random_token, line))
        found = library_secrets(value)
        if found:
            value = self._values(found, value)
        log_hosts = self._log_hosts(value)
        value = self._on_lines(value, AT_GATE, self._at_signs)
        value = self._on_lines(value, PATH_GATE, lambda line: PATH.sub(self._found("path"), line))
        value = self._on_lines(value, USER_KV_GATE, lambda line: USER_KV.sub(lambda m: self._secret("user", m), line))
        value = self._on_lines(value, HOST_KV_GATE, lambda line: HOST_KV.sub(lambda m: self._secret("host", m), line))
        value = self._words(self.usernames, "user", value)
        value = self._words([*self.hostnames, *log_hosts], "host", value)
        value = IPV4.sub(self._found("ip"), value)
        value = IPV6.sub(self._found("ip"), value)
        if ":" in value:
            value = IPV6_IFACE.sub(lambda m: m.group("keep") + self._placeholder("ip", m.group("ip")), value)
        value = FQDN.sub(self._public_or("host"), value)
        return NODE_NAME.sub(self._found("host"), value)

    def _at_signs(self, line: str) -> str:
        """E-mail addresses, user@host and scheme://user@ on a line with an "@"."""
        line = EMAIL.sub(self._found("email"), line)
        line = URL_USER.sub(self._found("user"), line)
        line = USER_AT.sub(self._found("user"), line)
        return AT_HOST.sub(self._found("host"), line)

    def _found(self, kind: str) -> Callable[[re.Match[str]], str]:
        """A replacement that leaves a match inside structured evidence alone (1.1.9.0 in 23.10-1.1.9.0, xid_48 in
        xid_scan:xid_48@GPU3, github.com in /go/src/github.com/...)."""
        return lambda m: m.group(0) if _inside_evidence(m.string, m.start(), m.end()) else \
            self._placeholder(kind, m.group(0))

    def _public_or(self, kind: str) -> Callable[[re.Match[str]], str]:
        """_found, except for a well-known public name (github.com, docs.nvidia.com), which stays."""
        found = self._found(kind)
        return lambda m: m.group(0) if is_public_host(m.group(0)) else found(m)

    def _values(self, found: Iterable[str], value: str) -> str:
        """Replace secret values that are not plain words (they may hold quotes, '@', '/', '+')."""
        ordered = sorted(found, key=len, reverse=True)
        edge: Callable[[str], str] = lambda s: r"(?<![\w])" if re.match(r"\w", s) else ""  # noqa: E731
        tail: Callable[[str], str] = lambda s: r"(?![\w])" if re.search(r"\w$", s) else ""  # noqa: E731
        pattern = re.compile("|".join(edge(v) + re.escape(v) + tail(v) for v in ordered))
        return pattern.sub(lambda m: self._placeholder("secret", m.group(0)), value)

    def data(self, value: Any) -> Any:
        """Redact every string inside JSON-like data (dict keys too: hosts key some results)."""
        return _walk(value, self.text)

    def restore(self, value: str) -> str:
        """Placeholders this redactor made back to their values; any other text (an invented <host-99>) stays."""
        return PLACEHOLDER.sub(lambda m: self.originals.get(m.group(0), m.group(0)), value)

    def restore_data(self, value: Any) -> Any:
        return _walk(value, self.restore)

    def restore_names(self, value: Any, names: Iterable[str]) -> Any:
        """Only the placeholders of `names` (case-insensitive) back to their values, in text or JSON-like data: the
        provider's own node names on the provider's own page; every other placeholder (secrets, the customer's
        names) stays."""
        wanted = {n.lower() for n in names if n}
        keep = {p: v for p, v in self.originals.items() if v.lower() in wanted and p.startswith("<host-")}
        if not keep:
            return value
        return _walk(value, lambda text: PLACEHOLDER.sub(lambda m: keep.get(m.group(0), m.group(0)), text))

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
            self.mapping[_key(kind, value)] = placeholder
            self.counts[kind] = max(self.counts.get(kind, 0), number)
        return self


def _key(kind: str, value: str) -> str:
    """The mapping key: host names, e-mail and IP addresses are case-insensitive, secrets, users and paths not
    (restore must give back "Scatter" and "scatter" each as it was)."""
    return f"{kind}:{value.lower()}" if kind in ("host", "email", "ip") else f"{kind}:{value}"


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
