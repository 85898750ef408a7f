"""Shared helpers for aidai verification scripts.

Shipped next to every script (the executor uploads both), so a script stays python3-stdlib only and
runs unchanged on a customer node, over SSH, or against a simulated host. Python >= 3.8.

A script reads its parameters as one JSON object on stdin (profile thresholds, time window, host
name). Every profile value may be null: this host has no expectation for it, and a check compares
nothing against it. With nothing on stdin every expectation is null (no SKU is assumed).
It prints exactly one JSON evidence object and exits 0; verdict rules:
FAIL confirms, PASS rejects, WARN is weak evidence, UNKNOWN means the check could not decide. A tool
that is missing or cannot run here (no systemd, no permission, no driver stack) is an UNKNOWN, never
evidence of a fault.
"""

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback

try:
    from checklib_record import RECORDER, REPLAY
except ImportError:  # loaded as a library by aidai itself (agent/checks/versions.py): nothing records or replays
    RECORDER = REPLAY = None

NA_VALUES = {"", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]", "Unknown Error",
             "[Insufficient Permissions]", "[GPU is lost]", "[Requires Root]", "ERR!"}
SEVERITY_RANK = {"PASS": 0, "INFO": 0, "WARN": 2, "FAIL": 3}
RAW_LIMIT = 4096
# with params `raw_limit` (bytes), a check also reports whole what it saw (each command's stdout and stderr, each
# file it read) up to that many bytes: the diagnosis keeps it as the evidence bundle of a confirmed cause
RAW_ENTRIES = 1000

# the keys a profile carries; run by hand (no params) a script expects nothing of the host
PROFILE_KEYS = ("name", "gpu_count", "gpu_name", "pci_device_id", "memory_mib", "compute_capability", "nvswitch",
                "nvlink_links", "nvlink_link_gbps", "topo_nvlink", "pcie_gen", "pcie_width", "temp_limit_c",
                "power_limit_w", "max_sm_clock_mhz", "hca_count", "ib_rate", "ib_mtu", "link_layer", "h2d_gbps",
                "p2p_gbps", "nccl_intranode_busbw", "nccl_internode_busbw", "ib_write_bw_gbps", "gemm_tflops",
                "straggler_ratio")
DEFAULT_PROFILE = dict((key, None) for key in PROFILE_KEYS)
# terminal escapes (colour, underline) are never data: driver 580's `nvidia-smi topo -m` underlines its header even
# when stdout is a pipe, and a parser looking for "GPU0" at a line's start must not see "\x1b[4mGPU0"
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# what a tool prints when it cannot run on this host or may not look: it says nothing about the host itself
REFUSAL_RE = re.compile("|".join([
    r"System has not been booted with systemd", r"Failed to connect to bus", r"Can't operate",
    r"Operation not permitted", r"Permission denied", r"Insufficient Permissions", r"insufficient permissions",
    r"No journal files were (?:found|opened)", r"read kernel buffer failed",
    r"pcilib: Cannot open", r"Cannot find any working access method",
    r"can't init UMAD library", r"umad_init failed", r"Failed to get IB devices list",
    r"unable to establish a connection to the specified host", r"Unable to connect to host engine",
    r"Could not open device at /dev/ipmi", r"Cannot connect to the Docker daemon",
    r"connect to the Docker daemon socket", r"must be (?:run as )?root", r"requires root",
    r"need(?:s)? to be root", r"Access denied",
]), re.IGNORECASE)


class Cmd(object):
    """Outcome of one external command."""

    def __init__(self, argv, rc, out, err, missing=False, timed_out=False, seconds=0.0):
        self.argv = argv
        self.rc = rc
        self.out = out
        self.err = err
        self.missing = missing
        self.timed_out = timed_out
        self.seconds = seconds

    @property
    def ok(self):
        return not self.missing and not self.timed_out and self.rc == 0

    @property
    def text(self):
        return self.out + ("\n" + self.err if self.err else "")

    @property
    def refused(self):
        """The tool ran but could not look: no systemd, no permission, no driver stack, no daemon to ask.

        A refusal with exit 0 counts only when there is no data beside it (journalctl prints its notices
        and exits 0 with nothing but "-- No entries --")."""
        if self.missing or self.timed_out or not self.refusal():
            return False
        data = [line for line in self.out.splitlines() if line.strip() and not line.startswith("-- ")]
        return self.rc != 0 or not data

    @property
    def unusable(self):
        """No answer about the host at all: the tool is missing or refused to look."""
        return self.missing or self.refused

    def refusal(self):
        """The line in which the tool says it cannot run or may not look, or ''."""
        for line in self.text.splitlines():
            if REFUSAL_RE.search(line):
                return line.strip()[:300]
        return ""

    def why(self):
        """Short reason this command gave no usable output."""
        name = self.argv[0]
        if getattr(self, "unrecorded", False):
            return "%s not in the bundle (the recording holds no `%s`)" % (name, " ".join(self.argv)[:200])
        if self.missing:
            return "%s not found" % name
        if self.timed_out:
            return "%s timed out" % name
        if self.refused:
            return "%s cannot run here: %s" % (name, self.refusal())
        return "%s exited %s: %s" % (name, self.rc, first_line(self.err or self.out))


AFTER_INCIDENT_S = 3600.0


class Check(object):
    """Collects findings and metrics for one check and prints the evidence object."""

    def __init__(self, name):
        self.name = name
        self.started = time.time()
        if RECORDER:
            RECORDER.start(name)
        self.params = _read_params()
        profile = dict(DEFAULT_PROFILE)
        given = self.params.get("profile")
        profile.update(given if isinstance(given, dict) else {})
        self.profile = profile
        self.host = self.params.get("host") or os.uname()[1]
        self.sysroot = os.environ.get("AIDAI_SYSROOT", "/")
        self.findings = []
        self.metrics = {}
        self.cmds = []
        self.raw = []
        self.targets = []
        self.needs = ""  # the input an UNKNOWN verdict waits for (see `unknown`)
        try:
            self.raw_limit = max(int(self.params.get("raw_limit") or 0), 0)
        except (TypeError, ValueError):
            self.raw_limit = 0
        self.outputs = []  # what the check saw, whole, when raw_limit asks for it
        self.raw_kept = 0
        self.raw_capped = False

    # ---- time ------------------------------------------------------------------------------
    def incident_time(self):
        """When the incident happened (params incident_at, epoch seconds), else now: events are judged against
        it, not against the moment the check runs, which may be hours or days later."""
        value = self.params.get("incident_at")
        return float(value) if isinstance(value, (int, float)) else time.time()

    def window(self, default_s, minimum_s=0.0):
        """(since, until) epoch bounds of the events that belong to the incident: `window_s` (params, default
        `default_s`, at least `minimum_s`) before it, up to AFTER_INCIDENT_S after it (trailing errors, and an
        incident time that is a ticket's open time rather than the failure's). Older events are history.

        params `events_since` (epoch seconds) sets the start itself, whatever the check's own minimum: verifying a
        fix counts only the events after it (an Xid from before the fix stays in the kernel log for good)."""
        at = self.incident_time()
        since = self.params.get("events_since")
        if isinstance(since, (int, float)) and not isinstance(since, bool):
            return float(since), at + AFTER_INCIDENT_S
        window = max(float(self.params.get("window_s", default_s) or default_s), minimum_s)
        return at - window, at + AFTER_INCIDENT_S

    # ---- expectations ---------------------------------------------------------------------
    def expect(self, key, kind=float):
        """The profile's expectation `key` as `kind` (float, int, bool, str), or None when this host has none.

        Zero and False are expectations ("no RDMA NIC", "no NVLink", "no NVSwitch"); null, absent and
        unparseable values are not."""
        value = self.profile.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if kind is bool:
            return value if isinstance(value, bool) else to_bool(str(value))
        if kind is str:
            return str(value).strip()
        try:
            return kind(float(value)) if kind is int else kind(value)
        except (TypeError, ValueError):
            return None

    def no_expectation(self, *keys, **kw):
        """Stop with UNKNOWN: what the check saw has nothing to be compared with on this host."""
        seen = kw.get("seen")
        self.unknown("%sno expectation for %s on this host" % (seen + "; " if seen else "", " / ".join(keys)))

    # ---- evidence sources -------------------------------------------------------------
    def run(self, argv, timeout=30, env=None):
        """Run a command without a shell; a missing tool or a timeout is recorded, never raised."""
        self.cmds.append(" ".join(argv))
        cmd = self._replayed(argv) if REPLAY else self._run(argv, timeout, env)
        if RECORDER:
            RECORDER.add({"run": list(argv), "rc": cmd.rc, "stdout": getattr(cmd, "raw_out", cmd.out),
                                          "stderr": getattr(cmd, "raw_err", cmd.err), "missing": cmd.missing,
                                          "timed_out": cmd.timed_out, "seconds": round(cmd.seconds, 3)})
        self._keep_whole({"cmd": " ".join(argv), "rc": cmd.rc, "missing": cmd.missing, "timed_out": cmd.timed_out,
                          "seconds": round(cmd.seconds, 3)}, stdout=cmd.out, stderr=cmd.err)
        return cmd

    @staticmethod
    def _replayed(argv):
        entry = REPLAY.run(argv)
        if entry is None:
            cmd = Cmd(argv, 127, "", "", missing=True)
            cmd.unrecorded = True
            return cmd
        return Cmd(argv, entry.get("rc"), strip_ansi(entry.get("stdout") or ""), strip_ansi(entry.get("stderr") or ""),
                   missing=bool(entry.get("missing")), timed_out=bool(entry.get("timed_out")),
                   seconds=entry.get("seconds") or 0.0)

    def _run(self, argv, timeout, env):
        start = time.time()
        if shutil.which(argv[0]) is None:
            return Cmd(argv, 127, "", "", missing=True)
        full_env = None
        if env:
            full_env = dict(os.environ)
            full_env.update(env)
        try:
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                  timeout=timeout, env=full_env)
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode("utf-8", "replace")
            return Cmd(argv, 124, out, "", timed_out=True, seconds=time.time() - start)
        except OSError as exc:
            return Cmd(argv, 126, "", str(exc), missing=True, seconds=time.time() - start)
        raw_out = proc.stdout.decode("utf-8", "replace")
        raw_err = proc.stderr.decode("utf-8", "replace")
        out, err = strip_ansi(raw_out), strip_ansi(raw_err)
        if proc.returncode == 127 and "not found" in err:
            # a wrapper or shell said the command does not exist on this host
            return Cmd(argv, 127, out, err, missing=True, seconds=time.time() - start)
        self._keep_raw(out or err)
        cmd = Cmd(argv, proc.returncode, out, err, seconds=time.time() - start)
        cmd.raw_out, cmd.raw_err = raw_out, raw_err  # a recording keeps what the tool printed, escapes and all
        return cmd

    def path(self, path):
        """A host path under the configured system root (AIDAI_SYSROOT, '/' on a real node)."""
        if self.sysroot in ("", "/"):
            return path
        return os.path.join(self.sysroot, path.lstrip("/"))

    def read(self, path, limit=4 << 20):
        """File text, or None when it is absent or unreadable."""
        if REPLAY:
            text = REPLAY.read(path)
        else:
            try:
                with open(self.path(path), "rb") as handle:
                    text = handle.read(limit).decode("utf-8", "replace")
            except OSError:
                text = None
            if RECORDER:
                RECORDER.add({"read": path, "text": text})
        if text is not None:
            self._keep_whole({"file": path}, text=text)
        return text

    def exists(self, path):
        if REPLAY:
            return REPLAY.path_exists(path)
        found = os.path.exists(self.path(path))
        if RECORDER:
            RECORDER.add({"exists": path, "value": found})
        return found

    def listdir(self, path):
        if REPLAY:
            return sorted(REPLAY.listdir(path))
        try:
            names = sorted(os.listdir(self.path(path)))
        except OSError:
            names = []
        if RECORDER:
            RECORDER.add({"listdir": path, "value": names})
        return names

    def _keep_whole(self, entry, **texts):
        """Record what the check saw (a command's stdout and stderr, a file's text) whole, within `raw_limit`
        bytes in all; past it the rest is cut and the evidence says so (`raw_capped`, each entry's `truncated`)."""
        if not self.raw_limit:
            return
        if len(self.outputs) >= RAW_ENTRIES:
            self.raw_capped = True
            return
        for key, text in texts.items():
            text = text or ""
            room = max(self.raw_limit - self.raw_kept, 0)
            entry[key] = text[:room]
            self.raw_kept += len(entry[key])
            if len(text) > room:
                entry["truncated"] = True
                entry[key + "_chars"] = len(text)
                self.raw_capped = True
        self.outputs.append(entry)

    def _keep_raw(self, text):
        used = sum(len(r) for r in self.raw)
        if text and used < RAW_LIMIT:
            self.raw.append(text[: RAW_LIMIT - used])

    # ---- evidence ---------------------------------------------------------------------
    def finding(self, fid, severity, entity, message, raw_line="", action=""):
        """`action`: what the vendor recommends doing about it ('reset GPU3'), for the report and the ticket."""
        item = {"id": fid, "severity": severity, "entity": str(entity), "message": message,
                "raw_line": (raw_line or "")[:500]}
        if action:
            item["action"] = action
        self.findings.append(item)

    def fail(self, fid, entity, message, raw_line="", action=""):
        self.finding(fid, "FAIL", entity, message, raw_line, action)

    def warn(self, fid, entity, message, raw_line="", action=""):
        self.finding(fid, "WARN", entity, message, raw_line, action)

    def info(self, fid, entity, message, raw_line="", action=""):
        self.finding(fid, "INFO", entity, message, raw_line, action)

    def unknown(self, reason, needs=""):
        """Stop: the check could not decide (tool missing, permission, unparseable output). `needs`: the input it
        was not given (a parameter, the job's logs): nothing on the host was hidden from it, it was not asked."""
        self.needs = needs
        self._emit("UNKNOWN", reason)
        sys.exit(0)

    def finish(self, ok_summary="no problem found"):
        worst = max([SEVERITY_RANK.get(f["severity"], 0) for f in self.findings] or [0])
        verdict = {0: "PASS", 2: "WARN", 3: "FAIL"}[worst]
        bad = [f for f in self.findings if f["severity"] == verdict]
        if bad:
            summary = "; ".join(f["message"] for f in bad[:3])
            if len(bad) > 3:
                summary += "; and %d more" % (len(bad) - 3)
        else:
            summary = ok_summary
        self._emit(verdict, summary)
        sys.exit(0)

    def _emit(self, verdict, summary):
        out = {
            "check": self.name,
            "host": self.host,
            "targets": self.targets,
            "verdict": verdict,
            "summary": summary,
            "findings": self.findings,
            "metrics": self.metrics,
            "cmds": self.cmds,
            "raw_excerpt": "".join(self.raw)[:RAW_LIMIT],
            "duration_s": round(time.time() - self.started, 3),
        }
        if self.raw_limit:
            out["raw_outputs"] = self.outputs
            out["raw_capped"] = self.raw_capped
        if REPLAY and REPLAY.unrecorded:
            out["not_in_bundle"] = REPLAY.unrecorded[:50]
        if self.needs:
            out["needs"] = self.needs
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


def main(name, body):
    """Run body(check); any crash becomes UNKNOWN with the error, never a PASS."""
    check = Check(name)
    try:
        body(check)
    except SystemExit:
        raise
    except Exception as exc:  # a broken parser must not hide as PASS
        tb = traceback.format_exc().strip().splitlines()
        check.unknown("check crashed: %s: %s (%s)" % (type(exc).__name__, exc, tb[-2].strip() if len(tb) > 1 else ""))
    check.finish()


def _read_params():
    if sys.stdin is None or sys.stdin.isatty():
        return {}
    try:
        text = sys.stdin.read()
    except (OSError, ValueError):
        return {}
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def loaded_modules(check):
    """Loaded kernel module names and where they were read: lsmod, else /proc/modules (what lsmod reads; a
    container without kmod still sees the host's), else /sys/module. (None, why) when none of them can tell."""
    cmd = check.run(["lsmod"])
    if cmd.ok:
        return {line.split()[0] for line in cmd.out.splitlines()[1:] if line.split()}, "lsmod"
    proc = check.read("/proc/modules")
    if proc and proc.strip():
        return {line.split()[0] for line in proc.splitlines() if line.split()}, "/proc/modules"
    names = check.listdir("/sys/module")
    if names:
        return set(names), "/sys/module"
    return None, cmd.why()


def which(name):
    """shutil.which for scripts: recorded with the check, answered from the recording on a replay."""
    if REPLAY:
        return REPLAY.tool(name)
    found = shutil.which(name)
    if RECORDER:
        RECORDER.add({"which": name, "path": found})
    return found


def euid():
    """The user id the check runs as on the host (root or not), recorded with it."""
    if REPLAY and REPLAY.euid is not None:
        return int(REPLAY.euid)
    return os.geteuid()


# ---- parsing helpers --------------------------------------------------------------------
def strip_ansi(text):
    return ANSI_RE.sub("", text) if "\x1b" in text else text


def first_line(text):
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def is_na(value):
    return value is None or value.strip() in NA_VALUES


def to_int(value):
    """int of a tool field; None for N/A, [Not Supported], garbage. Accepts hex (0x..)."""
    if value is None:
        return None
    text = value.strip()
    if is_na(text):
        return None
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(float(text.split()[0]))
    except (ValueError, IndexError):
        return None


def to_float(value):
    if value is None or is_na(value):
        return None
    match = re.search(r"-?\d+(?:\.\d+)?", value)
    return float(match.group(0)) if match else None


def to_bool(value):
    """Yes/No, 1/0, Enabled/Disabled, Active/Not Active; None when unreadable."""
    if value is None or is_na(value):
        return None
    text = value.strip().lower()
    if text in ("yes", "1", "true", "enabled", "active", "on"):
        return True
    if text in ("no", "0", "false", "disabled", "not active", "off"):
        return False
    return None


def parse_query_csv(text, fields):
    """Rows of `nvidia-smi --query-*=... --format=csv,noheader` as dicts keyed by field name.

    Lines that are not data rows (warnings, blank lines) or have the wrong number of columns are
    skipped, so truncated output yields the rows that are complete.
    """
    rows = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if len(row) != len(fields):
            continue
        rows.append({name: value.strip() for name, value in zip(fields, row)})
    return rows


def parse_q_sections(text):
    """`nvidia-smi -q` text into one dict per GPU: {'Section/Sub/Key': value} by indentation."""
    gpus = []
    current = None
    stack = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        if raw.startswith("GPU ") and ":" not in raw.split(" ", 1)[1][:2]:
            current = {"_bus_id": raw[4:].strip()}
            gpus.append(current)
            stack = []
            continue
        if current is None:
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        level = max(indent // 4 - 1, 0)
        if ":" in raw:
            key, _, value = raw.strip().partition(":")
            key = key.strip()
            value = value.strip()
            stack = stack[:level]
            if value:
                current["/".join([*stack, key])] = value
            else:
                stack.append(key)
        else:
            stack = [*stack[:level], raw.strip()]
    return gpus


# ---- versions -----------------------------------------------------------------------------
def vkey(text):
    """(535, 161, 8) for '535.161.08'; local suffixes ('+cu121', '+fa0c9a7', '-1') are dropped."""
    core = re.split(r"[+\s~-]", str(text).strip().lstrip("vV"), maxsplit=1)[0]
    parts = []
    for piece in core.split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group(0)))
    return tuple(parts)


def pattern_matches(pattern, version):
    """known_bad.yaml patterns: exact ('2.20.5'), minor ('2.20.*') or driver branch ('525')."""
    have, pattern = vkey(version), str(pattern)
    if not have:
        return False
    if pattern.endswith(".*"):
        prefix = vkey(pattern[:-2])
        return have[:len(prefix)] == prefix
    if "." not in pattern:
        return have[:1] == vkey(pattern)
    return have == vkey(pattern)


def known_bad_entry(entries, version):
    """The first known_bad.yaml entry of `entries` that lists `version`, honouring fixed_in; None if none does."""
    for entry in entries or []:
        fixed = entry.get("fixed_in")
        if fixed and vkey(version) >= vkey(str(fixed)):
            continue
        if any(pattern_matches(p, version) for p in entry.get("versions") or []):
            return entry
    return None
