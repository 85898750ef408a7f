"""NVIDIA's nvidia-bug-report.log[.gz] (what customers attach to support tickets) as a host recording: its sections
become the recorded outputs the checks replay, under the command lines the checks run.

nvidia-bug-report.sh writes sections separated by a line of 44 underscores: a file as "*** PATH", "*** ls: ..." and
its text ("*** PATH does not exist" / "is not readable" when it could not), a command as its command line, a blank
line and its output, the kernel log as "dmesg:" and a blank line. Only what a section really holds is recorded: the
checks' other commands are "not in the bundle".
"""

from __future__ import annotations

import calendar
import re
import shlex
import time
from typing import Any

from agent.collect.recording import HostRecording

SEPARATOR = "_" * 44
HEADER_RE = re.compile(r"Start of NVIDIA bug report log file")
DATE_RE = re.compile(r"^Date: (.+)$", re.M)
UNAME_RE = re.compile(r"^uname: \S+ (\S+)", re.M)
FILE_RE = re.compile(r"^\*\*\* (/\S+)$")
MISSING_FILE_RE = re.compile(r"^\*\*\* (/\S+) (?:does not exist|is not readable)$")
# the tools whose sections the checks can use, and the command line a check runs for them
ALIASES: dict[tuple[str, ...], list[str]] = {("nvidia-smi", "--query"): ["nvidia-smi", "-q"],
                                              ("nvidia-smi", "-q"): ["nvidia-smi", "-q"]}
KNOWN_TOOLS = ("nvidia-smi", "lspci", "journalctl", "dmidecode", "numactl", "lsusb", "modinfo", "ibstat",
               "ibv_devinfo", "nv-fabricmanager", "dcgmi", "lsmod", "uname", "nvidia-settings")
DMESG_ARGV = ["dmesg", "--time-format", "iso"]


def is_bug_report(text: str) -> bool:
    return HEADER_RE.search(text[:4096]) is not None


def sections(text: str) -> list[str]:
    """The report's sections (the text between separator lines), without the blank line that opens each."""
    parts = re.split(r"(?m)^" + SEPARATOR + r"\s*$", text)
    return [part.lstrip("\n") for part in parts[1:] if part.strip()]


def parse_bug_report(text: str, name: str = "nvidia-bug-report.log") -> HostRecording:
    head = text[:4096]
    hostname = (m.group(1) if (m := UNAME_RE.search(head)) else "") or name
    recording = HostRecording(hostname=hostname, collected_at=_date(head), source="nvidia-bug-report")
    recording.manifest = {"format": "nvidia-bug-report", "file": name, "sections": 0}
    for body in sections(text):
        lines = body.split("\n")
        first = lines[0].strip()
        if (m := MISSING_FILE_RE.match(first)) is not None:
            recording.exists[m.group(1)] = False
            recording.files[m.group(1)] = None
        elif (m := FILE_RE.match(first)) is not None:
            rest = lines[1:]
            if rest and rest[0].startswith("*** ls:"):
                rest = rest[1:]
            recording.files.setdefault(m.group(1), _trim("\n".join(rest)))
        elif first == "dmesg:":
            _add_run(recording, DMESG_ARGV, "\n".join(lines[1:]), note="the report's `dmesg`")
        elif (argv := _command(first)) is not None and (len(lines) < 2 or not lines[1].strip()):
            _add_run(recording, argv, "\n".join(lines[2:]))
        else:
            continue
        recording.manifest["sections"] += 1
    smi_q = next((r["stdout"] for r in recording.runs if r["run"] == ALIASES[("nvidia-smi", "-q")]), "")
    if smi_q:
        # the inventory asks nvidia-smi for these fields; `-q` printed every one of them: the same answer, reworded
        _add_run(recording, INVENTORY_QUERY, gpu_rows(smi_q), note="the report's `nvidia-smi --query`, as CSV")
    for argv in (r["run"] for r in recording.runs):
        recording.which.setdefault(argv[0], "/usr/bin/" + argv[0])
    return recording


INVENTORY_FIELDS = ["index", "name", "pci.bus_id", "pci.device_id", "memory.total", "driver_version", "uuid", "serial"]
INVENTORY_QUERY = ["nvidia-smi", "--query-gpu=" + ",".join(INVENTORY_FIELDS), "--format=csv,noheader,nounits"]
DRIVER_RE = re.compile(r"^Driver Version\s*:\s*(\S+)", re.M)


def gpu_rows(smi_q: str) -> str:
    """`--query-gpu=INVENTORY_FIELDS --format=csv,noheader,nounits` rows from `nvidia-smi -q` text: one per GPU in
    its order (NVML's index order), each field as -q printed it."""
    from agent.checks.versions import _lib as checklib

    driver = m.group(1) if (m := DRIVER_RE.search(smi_q)) else "[N/A]"
    rows = []
    for index, gpu in enumerate(checklib.parse_q_sections(smi_q)):
        memory = (gpu.get("FB Memory Usage/Total") or "[N/A]").replace(" MiB", "")
        rows.append(", ".join([str(index), gpu.get("Product Name", "[N/A]"), gpu["_bus_id"],
                               gpu.get("PCI/Device Id", "[N/A]"), memory, driver, gpu.get("GPU UUID", "[N/A]"),
                               gpu.get("Serial Number", "[N/A]")]))
    return "\n".join(rows)


def _command(line: str) -> list[str] | None:
    """The command line of a command section ('/usr/bin/nvidia-smi --query'), tool named by its base name; None when
    the line names no tool a check uses."""
    try:
        words = shlex.split(line)
    except ValueError:
        return None
    if not words or "|" in words:
        return None
    tool = words[0].rsplit("/", 1)[-1]
    if tool not in KNOWN_TOOLS:
        return None
    argv = [tool, *words[1:]]
    return ALIASES.get(tuple(argv), argv)


def _add_run(recording: HostRecording, argv: list[str], output: str, note: str = "") -> None:
    if any(r["run"] == argv for r in recording.runs):
        return
    entry: dict[str, Any] = {"run": argv, "rc": 0, "stdout": _trim(output), "stderr": "", "missing": False,
                             "timed_out": False, "seconds": 0.0}
    if note:
        entry["from"] = note
    recording.runs.append(entry)


def _trim(text: str) -> str:
    return text.rstrip("\n") + "\n" if text.strip() else ""


# date(1) as the report prints it: "Thu Oct 27 08:50:11 PM -03 2022", "Tue Oct 27 14:31:54 EDT 2009"
DATE_FORM_RE = re.compile(r"^\w{3} (\w{3}) +(\d{1,2}) (\d\d):(\d\d):(\d\d)(?: (AM|PM))? (\S+) (\d{4})$")
ZONES = {"UTC": 0, "GMT": 0, "Z": 0, "EST": -5, "EDT": -4, "CST": -6, "CDT": -5, "MST": -7, "MDT": -6, "PST": -8,
         "PDT": -7, "CET": 1, "CEST": 2, "BST": 1, "IST": 5.5, "JST": 9, "KST": 9, "SGT": 8, "AEST": 10, "AEDT": 11}
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _date(head: str) -> float:
    """The report's `Date:` line as epoch seconds (date(1)'s C-locale output with its zone); now when it is in
    another locale or an unknown zone, which only moves the incident's default time (the report's kernel log
    carries boot-relative stamps anyway)."""
    match = DATE_RE.search(head)
    form = DATE_FORM_RE.match(re.sub(r"\s+", " ", match.group(1).strip())) if match else None
    if form is None or form.group(1) not in MONTHS:
        return time.time()
    month, day, hour, minute, second, half, zone, year = form.groups()
    hour_i = int(hour) % 12 + (12 if half == "PM" else 0) if half else int(hour)
    numeric = re.fullmatch(r"([+-])(\d\d)(\d\d)?", zone)
    if numeric:
        offset = (int(numeric.group(2)) + int(numeric.group(3) or 0) / 60) * (-1 if numeric.group(1) == "-" else 1)
    elif zone in ZONES:
        offset = ZONES[zone]
    else:
        return time.time()
    stamp = calendar.timegm((int(year), MONTHS.index(month) + 1, int(day), hour_i, int(minute), int(second)))
    return stamp - offset * 3600
