"""One input policy for incident text, the same for the CLI (TEXT, --file, stdin, chat) and the API (the incident
field and uploaded files).

- Decoded from any common encoding: a BOM first (UTF-8, UTF-16, UTF-32), then UTF-8, then the encoding that
  charset-normalizer finds least messy among the encodings logs come in; ties go to the more common one (a short
  GBK line is valid cp949 too, a latin-1 line valid cp1250). Nothing is decoded into mojibake.
- Cleaned: ANSI escapes removed, \\r\\n and a lone \\r made \\n, other control characters dropped (\\t kept).
- Refused when it is not text (`NotText`: NUL bytes, no encoding fits, or mostly control characters), with one
  message that says what was received and what to send: the CLI prints it (exit 2), the API answers it (415).
- Excerpted when large (over `text_limit()`, 2 MiB unless AIDAI_MAX_TEXT_BYTES says otherwise): the head, every
  distinct error line with its context and the tail become the incident text, and the whole input is attached,
  byte for byte: held on the Incident until `save_files` writes it next to the run with its sha256 and size.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.incident import Attachment, Incident, IncidentError
from agent.reasoning.text_signals import ERROR_LINE, NOISE_LINE

DEFAULT_LIMIT = 2 * 2**20  # bytes; above it a log is excerpted
LIMIT_ENV = "AIDAI_MAX_TEXT_BYTES"
HEAD_LINES, TAIL_LINES, CONTEXT_LINES = 40, 80, 3
EXCERPT_CHARS = 200_000  # the excerpt's size, whatever the log's
MAX_LINE_CHARS = 1000  # a longer line is cut in the excerpt (the attached file has it whole)
MAX_CONTROL_SHARE = 0.10  # more control characters than this (after ANSI escapes) is not text
CHECK_CHARS = 2**20  # the share is measured on the start of a text

# the detector's candidates, most common in logs first: a tie (as messy) goes to the earlier one
CANDIDATES = ("gb18030", "cp1252", "cp932", "euc_jp", "big5", "cp949", "cp1251", "cp1250", "cp1253", "cp1254",
              "cp1257", "koi8_r", "latin_1")
MULTIBYTE = ("gb18030", "cp932", "euc_jp", "big5", "cp949")
MULTIBYTE_EVIDENCE = 64  # non-ASCII bytes
BOMS = ((b"\xff\xfe\x00\x00", "utf_32_le"), (b"\x00\x00\xfe\xff", "utf_32_be"), (b"\xef\xbb\xbf", "utf_8_sig"),
        (b"\xff\xfe", "utf_16_le"), (b"\xfe\xff", "utf_16_be"))
MAGIC = ((b"\x7fELF", "an ELF executable"), (b"\x1f\x8b", "a gzip archive"), (b"PK\x03\x04", "a zip archive"),
         (b"(\xb5/\xfd", "a zstd archive"), (b"\xfd7zXZ\x00", "an xz archive"), (b"BZh", "a bzip2 archive"),
         (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"%PDF", "a PDF document"),
         (b"SQLite format 3\x00", "an SQLite database"))
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves
                  r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks
                  r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
                  r"|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]")
ANSI_BYTES = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
ASCII_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")
NON_ASCII_LINE = re.compile(rb"[^\n]*[\x80-\xff][^\n]*")
HALFWIDTH_KANA = re.compile(r"[\uff61-\uff9f]")
SAMPLE_BYTES = 256 * 1024
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff\ud800-\udfff]")  # all but \t and \n (\r is gone by then)
GARBAGE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffd]")
LEADING_TIME = re.compile(r"^\s*(?:\[[^\]]*\]\s*|\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?\s*"
                          r"|[A-Z][a-z]{2} +\d+ [\d:]+\s*)+")
# ERROR_LINE's alternatives are lower-case words: the same pattern without IGNORECASE, on lowered text
ERROR_LINE_LOWER = (re.compile(ERROR_LINE.pattern, ERROR_LINE.flags & ~re.IGNORECASE)
                    if ERROR_LINE.pattern == ERROR_LINE.pattern.lower() else ERROR_LINE)
SEND = ("send the error log as text (plain log lines in any encoding: UTF-8, GBK, Shift-JIS, latin-1 ...), "
        "not a binary, an archive or a core dump")


class NotText(IncidentError):
    """Input that is not text; the message says what was received and what to send."""


@dataclass
class Received:
    """One input as the incident gets it: its text (whole, or an excerpt) and, when excerpted, the whole input."""

    name: str
    text: str
    size: int  # bytes received
    encoding: str
    whole: bytes | None = None  # the input as received, when `text` is an excerpt of it
    sha256: str = ""
    lines: int = 0  # of the whole input
    excerpted_lines: int = 0

    @property
    def excerpted(self) -> bool:
        return self.whole is not None

    def attachment(self) -> Attachment:
        return Attachment(name=self.name, path="", sha256=self.sha256, bytes=self.size,
                          excerpted_lines=self.excerpted_lines)


def text_limit() -> int:
    """The size (bytes) above which a log is excerpted: AIDAI_MAX_TEXT_BYTES, else 2 MiB."""
    value = os.environ.get(LIMIT_ENV, "").strip()
    if not value:
        return DEFAULT_LIMIT
    if not value.isdigit() or int(value) < 1024:
        raise IncidentError(f"{LIMIT_ENV}={value!r}: give a number of bytes, at least 1024")
    return int(value)


# ---- decoding and cleaning -------------------------------------------------------------------------------------
def clean(text: str) -> str:
    """ANSI escapes removed, line ends made \\n, every other control character (and stray BOM, lone surrogate)
    dropped; \\t and \\n kept."""
    if "\x1b" in text or "\x9b" in text:
        text = ANSI.sub("", text)
    return CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def decode(data: bytes, name: str) -> tuple[str, str]:
    """The bytes as cleaned text and the encoding they were read in; NotText when they are not text."""
    if not data:
        return "", "utf_8"
    bom = next((encoding for mark, encoding in BOMS if data.startswith(mark)), None)
    if bom is not None:
        text = data.decode(bom, "replace")
        if bom != "utf_8_sig" and _messy(text):  # random bytes may begin like a UTF-16 BOM
            raise NotText(refusal(name, data, f"not {bom.replace('_', '-').upper()} text despite its byte order mark"))
        return _checked(text, data, name), bom
    nul = data.find(b"\x00")
    if nul >= 0:
        raise NotText(refusal(name, data, f"NUL bytes, the first at byte {nul:,}"))
    encoding = _encoding(data)
    if encoding is None:
        raise NotText(refusal(name, data, "no text encoding fits it"))
    return _checked(data.decode(encoding, "replace"), data, name), encoding


def _encoding(data: bytes) -> str | None:
    """UTF-8 when it is (a few broken sequences in otherwise valid UTF-8, e.g. a log cut mid-character, are
    still UTF-8), else charset-normalizer's least messy candidate, the more common encoding on a tie."""
    try:
        data.decode("utf-8")
        return "utf_8"
    except UnicodeDecodeError:
        pass
    as_utf8 = data.decode("utf-8", "replace")
    broken = as_utf8.count("\ufffd") - data.count(b"\xef\xbf\xbd")
    multibyte = len(as_utf8) - len(as_utf8.encode("ascii", "ignore")) - broken
    if broken * 1000 <= len(data) and multibyte >= 4 * broken:
        return "utf_8"
    from charset_normalizer import from_bytes

    sample = _sample(data)
    scored = [(m.chaos + _kana_penalty(str(m)), m) for m in from_bytes(sample, cp_isolation=list(CANDIDATES))]
    if not scored:
        return None
    if len(sample) - len(sample.decode("latin_1").encode("ascii", "ignore")) >= MULTIBYTE_EVIDENCE:
        # many non-ASCII bytes that all pair up into valid CJK characters: text in a single-byte encoding almost
        # never does (an accented letter before a space or a line end breaks the pairs), so the CJK reading wins
        # even when the mess detector finds it less tidy (e.g. a few characters repeated on every line)
        multi = [(score, m) for score, m in scored if set(m.could_be_from_charset) & set(MULTIBYTE)]
        scored = multi or scored
    least = min(score for score, _ in scored)
    # a match stands for every candidate that decodes to the same text (`could_be_from_charset`)
    ties = [e for score, m in scored if score <= least + 0.01 for e in m.could_be_from_charset]
    return min(ties, key=lambda e: CANDIDATES.index(e) if e in CANDIDATES else len(CANDIDATES))


def _sample(data: bytes) -> bytes:
    """What the detector reads: the lines with non-ASCII bytes (the rest is the same in every candidate), without
    ANSI escapes and control bytes (no candidate's multi-byte characters contain bytes below 0x40), at most
    SAMPLE_BYTES."""
    lines: list[bytes] = []
    size = 0
    for match in NON_ASCII_LINE.finditer(data):
        line = ASCII_CONTROL.sub(b"", ANSI_BYTES.sub(b"", match.group(0)))
        lines.append(line)
        size += len(line) + 1
        if size >= SAMPLE_BYTES:
            break
    return b"\n".join(lines)


def _kana_penalty(text: str) -> float:
    """GBK read as Shift-JIS comes out as half-width katakana, which Japanese text seldom uses: a decoding made
    mostly of them counts as messy."""
    wide = len(text) - len(text.encode("ascii", "ignore"))
    kana = len(HALFWIDTH_KANA.findall(text))
    return 0.2 if wide and kana > 0.3 * wide else 0.0


def _messy(text: str) -> bool:
    from charset_normalizer.md import mess_ratio

    return mess_ratio(text[:100_000], 0.2) >= 0.2


def _checked(text: str, data: bytes | None, name: str) -> str:
    """TEXT cleaned, or NotText when it is mostly control characters (or undecodable bytes): judged on its first
    CHECK_CHARS characters."""
    head = text[:CHECK_CHARS]
    bare = ANSI.sub("", head) if "\x1b" in head or "\x9b" in head else head
    garbage = len(GARBAGE.findall(bare))
    if garbage and garbage > MAX_CONTROL_SHARE * max(len(bare), 1):
        share = f"{garbage / max(len(bare), 1):.0%} of it is control characters or undecodable bytes"
        raise NotText(refusal(name, data if data is not None else text.encode("utf-8", "surrogatepass"), share))
    return clean(text)


def refusal(name: str, data: bytes, why: str) -> str:
    """The one message for input that is not text: what was received (name, size, kind, why) and what to send."""
    kind = next((what for magic, what in MAGIC if data.startswith(magic)), "binary data")
    hint = " (unpack it and send the log inside)" if "archive" in kind else ""
    return f"{name} is not text: received {_size(len(data))} of {kind}{hint} ({why}); {SEND}"


# ---- one input -------------------------------------------------------------------------------------------------
def receive_bytes(data: bytes, name: str, limit: int | None = None) -> Received:
    """Bytes from a file, stdin or an upload, under the policy (NotText when they are not text)."""
    name = Path(name).name or name
    text, encoding = decode(data, name)
    return _bounded(Received(name=name, text=text, size=len(data), encoding=encoding), data, limit)


def receive_text(text: str, name: str, limit: int | None = None) -> Received:
    """Text that arrives decoded (an argument, a form or JSON field, a prompt), under the same policy. An argument
    the locale could not decode (lone surrogates from surrogateescape) is decoded again from its bytes."""
    if re.search(r"[\udc80-\udcff]", text):
        try:
            return receive_bytes(text.encode("utf-8", "surrogateescape"), name, limit)
        except UnicodeEncodeError:
            pass
    if "\x00" in text:
        data = text.encode("utf-8", "surrogatepass")
        raise NotText(refusal(name, data, f"NUL characters, the first at character {text.index(chr(0)):,}"))
    cleaned = _checked(text, None, name)
    data = text.encode("utf-8", "surrogatepass")
    return _bounded(Received(name=name, text=cleaned, size=len(data), encoding="utf_8"), data, limit)


def clean_field(text: str, name: str) -> str:
    """A short field (the environment) under the same policy, never excerpted."""
    return receive_text(text, name, limit=len(text.encode("utf-8", "surrogatepass")) + 1).text


def check_text(data: bytes, name: str) -> None:
    """NotText unless DATA is text (a file kept as it is, e.g. the job's logs for the L4 localizer)."""
    decode(data, Path(name).name or name)


def _bounded(received: Received, data: bytes, limit: int | None) -> Received:
    limit = text_limit() if limit is None else limit
    if received.size <= limit:
        return received
    received.whole = data
    received.sha256 = hashlib.sha256(data).hexdigest()
    received.text, received.lines, received.excerpted_lines = excerpt(received.text, received.name, received.size,
                                                                      received.sha256, limit)
    return received


# ---- the excerpt of a large log --------------------------------------------------------------------------------
def excerpt(text: str, name: str, size: int, sha256: str, limit: int) -> tuple[str, int, int]:
    """The head, each distinct error line (text_signals.ERROR_LINE, repeats told apart without their leading
    timestamp) with CONTEXT_LINES around it while EXCERPT_CHARS last, and the tail, in the log's order, with a
    marker for each gap and a closing note; and the counts of lines: in the log, in the excerpt."""
    lines = text.removesuffix("\n").split("\n")
    count = len(lines)
    errorish = _errorish(text, lines)
    keep = set(range(min(HEAD_LINES, count))) | set(range(max(0, count - TAIL_LINES), count))
    budget = EXCERPT_CHARS - sum(len(_clip(lines[i])) + 1 for i in keep)
    seen: set[str] = set()
    unfit: set[int] = set()  # distinct error lines the budget left out (the others left out are repeats)
    for i, line in enumerate(lines):
        if not errorish[i]:
            continue
        key = LEADING_TIME.sub("", line).strip()[:MAX_LINE_CHARS]
        if key in seen:
            continue
        seen.add(key)
        window = [j for j in range(max(0, i - CONTEXT_LINES), min(count, i + CONTEXT_LINES + 1)) if j not in keep]
        cost = sum(len(_clip(lines[j])) + 1 for j in window)
        if cost > budget:
            unfit.add(i)
            continue
        keep.update(window)
        budget -= cost
    out: list[str] = []
    previous = -1
    for i in [*sorted(keep), count]:
        if i > previous + 1:
            gap = range(previous + 1, i)
            out.append(_gap(len(gap), sum(errorish[j] for j in gap), len(unfit.intersection(gap))))
        if i < count:
            out.append(_clip(lines[i]))
        previous = i
    # worded (and without the file's name) to match no error-line pattern: a `#` line, which key_lines skips
    note = (f"# aidai: an excerpt of a {_size(size)} log ({count:,} lines; incident text is kept under "
            f"{_size(limit)}): its first {HEAD_LINES} lines, each distinct line of note with {CONTEXT_LINES} lines "
            f"around it, its last {TAIL_LINES} lines ({len(keep):,} lines in all); the whole file is attached")
    if unfit:
        note += f"; {len(unfit):,} more distinct lines of note did not fit"
    out.append(note)
    return "\n".join(out), count, len(keep)


def _errorish(text: str, lines: list[str]) -> list[bool]:
    """Which lines are error lines (ERROR_LINE, not a NOISE_LINE). One case-sensitive search over the lowered text
    (ERROR_LINE's words are lower case): ten times faster than the case-insensitive pattern on a large log."""
    flags = [False] * len(lines)
    low = text.lower()  # lowering never adds or removes a newline: line i of `low` is line i of `text`
    line, pos = 0, 0
    while (match := ERROR_LINE_LOWER.search(low, pos)) is not None:
        line += low.count("\n", pos, match.start())
        flags[line] = not NOISE_LINE.match(lines[line])
        end = low.find("\n", match.end())
        if end < 0:
            break
        pos, line = end + 1, line + 1 + low.count("\n", match.end(), end)
    return flags


def _gap(lines: int, noted: int, unfit: int) -> str:
    parts = [f"{noted - unfit:,} repeats of lines of note shown above"] if noted > unfit else []
    parts += [f"{unfit:,} distinct lines of note that did not fit"] if unfit else []
    return f"# ... {lines:,} lines left out" + (f" ({'; '.join(parts)})" if parts else "") + " ..."


def _clip(line: str) -> str:
    if len(line) <= MAX_LINE_CHARS:
        return line
    return f"{line[:MAX_LINE_CHARS]} ... [{len(line) - MAX_LINE_CHARS:,} more characters]"


def _size(size: int) -> str:
    if size < 10 * 1024:
        return f"{size:,} bytes"
    return f"{size / 2**10:,.0f} KiB" if size < 2**20 else f"{size / 2**20:,.1f} MiB"


# ---- the incident and its attached files -----------------------------------------------------------------------
def joined(parts: Sequence[Received]) -> str:
    return "\n\n".join(p.text for p in parts if p.text.strip()) or (parts[0].text if parts else "")


def hold(incident: Incident, parts: Sequence[Received]) -> Incident:
    """INCIDENT with the whole inputs of the excerpted PARTS as files (not saved yet: `save_files` writes them)."""
    names: set[str] = {f.name for f in incident.files}
    for part in parts:
        if part.whole is None:
            continue
        name = _unique(_file_name(part.name), names)
        names.add(name)
        incident.files.append(part.attachment().model_copy(update={"name": name}))
        incident._unsaved[name] = part.whole
    return incident


def save_files(incident: Incident, folder: Path, recorded: Path | None = None) -> Incident:
    """Write the incident's unsaved files to FOLDER and record where (in RECORDED when FOLDER is a staging folder
    renamed to it afterwards); the sha256 is checked against what is written."""
    if not incident._unsaved:
        return incident
    folder.mkdir(parents=True, exist_ok=True)
    for i, attached in enumerate(incident.files):
        data = incident._unsaved.pop(attached.name, None)
        if data is None:
            continue
        path = folder / attached.name
        path.write_bytes(data)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != attached.sha256:
            raise OSError(f"{path}: written bytes differ from the input (sha256 {digest} != {attached.sha256})")
        incident.files[i] = attached.model_copy(update={"path": str((recorded or folder).resolve() / attached.name)})
    return incident


SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def _file_name(name: str) -> str:
    """A safe file name for an input: its own, `stdin.log`, or `incident.txt` for a field or argument."""
    if " " in name:  # "the incident field", "the incident text": not a file's name
        return "incident.txt"
    safe = SAFE_NAME.sub("_", Path(name).name).strip("._") or "input"
    return safe if "." in safe else f"{safe}.log"


def _unique(name: str, taken: set[str]) -> str:
    stem, dot, suffix = name.partition(".")
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{stem}-{n}{dot}{suffix}"
    return candidate
