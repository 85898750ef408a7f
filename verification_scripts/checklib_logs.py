"""Kernel and system log helpers for the verification scripts: where to read the kernel log, and the time of a
line in any common format. Shipped with checklib.py; python3 stdlib only (>= 3.8)."""

import re
import time

from checklib import first_line, to_float


def kernel_log(check, since_epoch=None, until_epoch=None):
    """Kernel log lines as (epoch_seconds or None, text), newest source first, within the incident's window
    (check.window: 2 h before the incident time by default, up to an hour after it).

    journalctl -k (with --since/--until) is preferred, then dmesg with ISO time, then kern.log/syslog.
    Returns (lines, source) or (None, reason) when no source is readable.
    """
    since_default, until_default = check.window(7200)
    since = since_default if since_epoch is None else since_epoch
    until = until_default if until_epoch is None else until_epoch
    cmd = check.run(["journalctl", "-k", "--no-pager", "-o", "short-iso", "--since", stamp(since),
                     "--until", stamp(until)], timeout=60)
    if journal_readable(cmd):
        return [(iso_epoch(line), line) for line in cmd.out.splitlines() if line.strip()], "journalctl -k"
    reasons = [journal_why(cmd)]
    cmd = check.run(["dmesg", "--time-format", "iso"], timeout=60)
    if cmd.ok:
        lines = [(iso_epoch(line), line) for line in cmd.out.splitlines() if line.strip()]
        return [(t, text) for t, text in lines if t is None or since <= t <= until], "dmesg"
    reasons.append(cmd.why())
    for path in ("/var/log/kern.log", "/var/log/syslog", "/var/log/messages"):
        text = check.read(path)
        if text is not None:
            return [(None, line) for line in text.splitlines() if line.strip()], path
    reasons.append("no readable kern.log/syslog/messages")
    return None, "; ".join(reasons)


def stamp(epoch):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(max(epoch, 0)))


# journalctl run without the adm/systemd-journal group shows only the caller's own messages: an empty kernel
# log then means "hidden", not "quiet"
JOURNAL_HIDDEN = ("No journal files", "not seeing messages from other users and the system")


def journal_readable(cmd):
    """journalctl answered with the system's journal (possibly empty), not a refusal or a partial view."""
    return cmd.ok and not cmd.refused and not any(text in cmd.text for text in JOURNAL_HIDDEN)


def journal_why(cmd):
    """Why journalctl's answer is not the system journal."""
    if not cmd.ok or cmd.refused:
        return cmd.why()
    hint = next((line.strip() for line in cmd.text.splitlines() if any(t in line for t in JOURNAL_HIDDEN)), "")
    if hint:
        return "journalctl cannot show the system journal: %s" % hint
    return "journalctl gave no dated lines (%s)" % (first_line(cmd.out) or "empty answer")


ISO_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,]\d+)?([+-]\d{2}:?\d{2}|Z)?")


def iso_epoch(line):
    match = ISO_RE.match(line)
    if not match:
        return None
    tz = match.group(3) or ""
    stamp = "%sT%s%s" % (match.group(1), match.group(2), tz.replace("Z", "+00:00"))
    if re.search(r"[+-]\d{4}$", stamp):
        stamp = stamp[:-2] + ":" + stamp[-2:]
    try:
        from datetime import datetime

        parsed = datetime.fromisoformat(stamp)
        if parsed.tzinfo is None:
            return time.mktime(parsed.timetuple())
        return parsed.timestamp()
    except ValueError:
        return None


MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                       "Dec"), 1)}
DECODE_PREFIX_RE = re.compile(r"^[a-z]+\s*:[a-z]+\s*: ")  # dmesg -x: 'kern  :warn  : '
CTIME_RE = re.compile(r"^\[?[A-Z][a-z]{2} ([A-Z][a-z]{2})\s+(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]?")
SYSLOG_RE = re.compile(r"^([A-Z][a-z]{2})\s+(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) ")
MONO_RE = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]")
KMSG_RE = re.compile(r"^\d+,\d+,(\d+),[^;]*;")


def boot_epoch(check):
    """When the host booted (from /proc/uptime), to date raw dmesg and /dev/kmsg lines; None if unknown."""
    text = check.read("/proc/uptime")
    value = to_float(text.split()[0]) if text and text.split() else None
    return time.time() - value if value is not None else None


def line_epoch(line, boot=None, now=None):
    """Epoch seconds of a kernel or syslog line in any common format (ISO, dmesg -T, syslog, raw, kmsg)."""
    text = DECODE_PREFIX_RE.sub("", line, count=1)
    stamp = iso_epoch(text)
    if stamp is not None:
        return stamp
    now = time.time() if now is None else now
    match = CTIME_RE.match(text)
    if match and match.group(1) in MONTHS:
        month, day, hh, mm, ss, year = match.groups()
        return time.mktime((int(year), MONTHS[month], int(day), int(hh), int(mm), int(ss), 0, 0, -1))
    match = SYSLOG_RE.match(text)
    if match and match.group(1) in MONTHS:
        month, day, hh, mm, ss = match.groups()
        year = time.localtime(now).tm_year
        stamp = time.mktime((year, MONTHS[month], int(day), int(hh), int(mm), int(ss), 0, 0, -1))
        # syslog has no year: a stamp in the future belongs to last year
        return stamp if stamp <= now + 86400 else time.mktime(
            (year - 1, MONTHS[month], int(day), int(hh), int(mm), int(ss), 0, 0, -1))
    if boot is not None:
        match = MONO_RE.match(text)
        if match:
            return boot + float(match.group(1))
        match = KMSG_RE.match(text)
        if match:
            return boot + int(match.group(1)) / 1e6
    return None
