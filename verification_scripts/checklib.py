"""Shared helpers for aidai verification scripts.

Shipped next to every script (the executor uploads both), so a script stays python3-stdlib only and
runs unchanged on a customer node, over SSH, or against a simulated host. Python >= 3.8.

A script reads its parameters as one JSON object on stdin (profile thresholds, time window, host
name); with nothing on stdin it uses the defaults of the H100-SXM-8 profile it was written for.
It prints exactly one JSON evidence object and exits 0; verdict rules:
FAIL confirms, PASS rejects, WARN is weak evidence, UNKNOWN means the check could not decide.
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

NA_VALUES = {"", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]", "Unknown Error",
             "[Insufficient Permissions]", "[GPU is lost]", "[Requires Root]", "ERR!"}
SEVERITY_RANK = {"PASS": 0, "INFO": 0, "WARN": 2, "FAIL": 3}
RAW_LIMIT = 4096

DEFAULT_PROFILE = {
    "name": "H100-SXM-8",
    "gpu_count": 8,
    "gpu_name": "NVIDIA H100 80GB HBM3",
    "nvswitch": True,
    "nvlink_links": 18,
    "nvlink_link_gbps": 26.562,
    "topo_nvlink": "NV18",
    "pcie_gen": 5,
    "pcie_width": 16,
    "temp_limit_c": 85,
    "hca_count": 8,
    "ib_rate": 400,
    "ib_mtu": 4096,
    "h2d_gbps": 48.0,
    "p2p_gbps": 335.0,
    "nccl_intranode_busbw": 460.0,
    "nccl_internode_busbw": 150.0,
    "ib_write_bw_gbps": 380.0,
    "gemm_tflops": 600.0,
    "straggler_ratio": 0.9,
}


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

    def why(self):
        """Short reason this command gave no usable output."""
        name = self.argv[0]
        if self.missing:
            return "%s not found" % name
        if self.timed_out:
            return "%s timed out" % name
        return "%s exited %s: %s" % (name, self.rc, first_line(self.err or self.out))


class Check(object):
    """Collects findings and metrics for one check and prints the evidence object."""

    def __init__(self, name):
        self.name = name
        self.started = time.time()
        self.params = _read_params()
        profile = dict(DEFAULT_PROFILE)
        profile.update(self.params.get("profile") or {})
        self.profile = profile
        self.host = self.params.get("host") or os.uname()[1]
        self.sysroot = os.environ.get("AIDAI_SYSROOT", "/")
        self.findings = []
        self.metrics = {}
        self.cmds = []
        self.raw = []
        self.targets = []

    # ---- evidence sources -------------------------------------------------------------
    def run(self, argv, timeout=30, env=None):
        """Run a command without a shell; a missing tool or a timeout is recorded, never raised."""
        self.cmds.append(" ".join(argv))
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
        out = proc.stdout.decode("utf-8", "replace")
        err = proc.stderr.decode("utf-8", "replace")
        if proc.returncode == 127 and "not found" in err:
            # a wrapper or shell said the command does not exist on this host
            return Cmd(argv, 127, out, err, missing=True, seconds=time.time() - start)
        self._keep_raw(out or err)
        return Cmd(argv, proc.returncode, out, err, seconds=time.time() - start)

    def path(self, path):
        """A host path under the configured system root (AIDAI_SYSROOT, '/' on a real node)."""
        if self.sysroot in ("", "/"):
            return path
        return os.path.join(self.sysroot, path.lstrip("/"))

    def read(self, path, limit=4 << 20):
        """File text, or None when it is absent or unreadable."""
        try:
            with open(self.path(path), "rb") as handle:
                return handle.read(limit).decode("utf-8", "replace")
        except OSError:
            return None

    def exists(self, path):
        return os.path.exists(self.path(path))

    def listdir(self, path):
        try:
            return sorted(os.listdir(self.path(path)))
        except OSError:
            return []

    def _keep_raw(self, text):
        used = sum(len(r) for r in self.raw)
        if text and used < RAW_LIMIT:
            self.raw.append(text[: RAW_LIMIT - used])

    # ---- evidence ---------------------------------------------------------------------
    def finding(self, fid, severity, entity, message, raw_line=""):
        self.findings.append({"id": fid, "severity": severity, "entity": str(entity), "message": message,
                              "raw_line": (raw_line or "")[:500]})

    def fail(self, fid, entity, message, raw_line=""):
        self.finding(fid, "FAIL", entity, message, raw_line)

    def warn(self, fid, entity, message, raw_line=""):
        self.finding(fid, "WARN", entity, message, raw_line)

    def info(self, fid, entity, message, raw_line=""):
        self.finding(fid, "INFO", entity, message, raw_line)

    def unknown(self, reason):
        """Stop: the check could not decide (tool missing, permission, unparseable output)."""
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


# ---- parsing helpers --------------------------------------------------------------------
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
