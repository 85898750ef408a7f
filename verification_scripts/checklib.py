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


def kernel_log(check, since_epoch=None):
    """Kernel log lines as (epoch_seconds or None, text), newest source first.

    journalctl -k (with --since) is preferred, then dmesg with ISO time, then kern.log/syslog.
    Returns (lines, source) or (None, reason) when no source is readable.
    """
    if since_epoch is None:
        since_epoch = time.time() - float(check.params.get("window_s", 7200))
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since_epoch))
    cmd = check.run(["journalctl", "-k", "--no-pager", "-o", "short-iso", "--since", since], timeout=60)
    if cmd.ok and "No journal files" not in cmd.text:
        return [(_iso_epoch(line), line) for line in cmd.out.splitlines() if line.strip()], "journalctl -k"
    reasons = [cmd.why()]
    cmd = check.run(["dmesg", "--time-format", "iso"], timeout=60)
    if cmd.ok:
        lines = [(_iso_epoch(line), line) for line in cmd.out.splitlines() if line.strip()]
        return [(t, text) for t, text in lines if t is None or t >= since_epoch], "dmesg"
    reasons.append(cmd.why())
    for path in ("/var/log/kern.log", "/var/log/syslog", "/var/log/messages"):
        text = check.read(path)
        if text is not None:
            return [(None, line) for line in text.splitlines() if line.strip()], path
    reasons.append("no readable kern.log/syslog/messages")
    return None, "; ".join(reasons)


ISO_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,]\d+)?([+-]\d{2}:?\d{2}|Z)?")


def _iso_epoch(line):
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


# ---- RDMA ports (shared by the network checks) ------------------------------------------------------
IB_CLASS = "/sys/class/infiniband"


def _sysfs_enum(text):
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp' (sysfs port state files)."""
    value = (text or "").strip()
    return value.split(":", 1)[1].strip() if ":" in value else value


def rdma_ports(check):
    """Every port under /sys/class/infiniband as a dict: dev, port, state, phys_state, rate_gbps,
    link_layer, hca_type, fw_ver, netdevs. Empty when the kernel shows no RDMA device."""
    ports = []
    for dev in check.listdir(IB_CLASS):
        base = IB_CLASS + "/" + dev
        for port in check.listdir(base + "/ports"):
            path = "%s/ports/%s" % (base, port)
            ports.append({
                "dev": dev,
                "port": to_int(port) or 1,
                "state": _sysfs_enum(check.read(path + "/state")).upper(),
                "phys_state": _sysfs_enum(check.read(path + "/phys_state")),
                "rate_gbps": to_float(check.read(path + "/rate")),
                "link_layer": (check.read(path + "/link_layer") or "").strip(),
                "hca_type": (check.read(base + "/hca_type") or "").strip(),
                "fw_ver": (check.read(base + "/fw_ver") or "").strip(),
                "netdevs": check.listdir(base + "/device/net"),
            })
    return ports


def port_gid(check, dev, port, index):
    """(gid, type) of one GID table slot; gid None when the slot is absent or all zeros."""
    base = "%s/%s/ports/%s/" % (IB_CLASS, dev, port)
    gid = (check.read("%sgids/%s" % (base, index)) or "").strip()
    kind = (check.read("%sgid_attrs/types/%s" % (base, index)) or "").strip()
    if not gid or not gid.replace("0", "").replace(":", ""):
        return None, kind
    return gid, kind


def port_up(port):
    return port.get("state") == "ACTIVE" and port.get("phys_state") == "LinkUp"


def data_ports(ports, profile):
    """The ports of the GPU fabric: the InfiniBand ones; on an all-Ethernet (RoCE) host, the ports of
    the adapter model that reaches the profile's rate, not the slower control-plane/storage NICs."""
    # ibstat builds older than the RoCE era print no link layer: those ports are InfiniBand
    infiniband = [p for p in ports if (p.get("link_layer") or "InfiniBand") == "InfiniBand"]
    if infiniband:
        return infiniband
    ethernet = [p for p in ports if p.get("link_layer") == "Ethernet"]
    if not ethernet:
        return []
    want = float(profile.get("ib_rate") or 0)
    fast = {p.get("hca_type") for p in ethernet if (p.get("rate_gbps") or 0) >= want}
    if not fast:
        best = max(p.get("rate_gbps") or 0 for p in ethernet)
        fast = {p.get("hca_type") for p in ethernet if (p.get("rate_gbps") or 0) == best}
    if fast == {""}:  # adapter model unknown: only the rate tells the rails apart
        return [p for p in ethernet if (p.get("rate_gbps") or 0) >= want]
    return [p for p in ethernet if p.get("hca_type") in fast]


# ---- nccl-tests output (shared by the NCCL checks) --------------------------------------------------
NCCL_FAILURE_RE = re.compile(r"Test (?:NCCL |CUDA )?failure|Test timeout|NCCL failure|CUDA failure")
LAUNCHER_FAILURE_RE = re.compile(r"not enough slots available|mpirun (?:was unable|noticed|detected)|"
                                 r"ORTE was unable|PRTE has lost communication|No such file or directory.*_perf")


def parse_nccl_tests(text):
    """nccl-tests stdout: result rows, out-of-bounds and average lines, NCCL WARN and failure lines.

    Columns are read by name from the table header, so both the old layout (`error`, no `root`) and
    the new one (`root`, `#wrong`) parse; without a header the token count decides. Each row is
    {size, busbw: [out-of-place, in-place], wrong: [..]} with None for N/A cells.
    """
    out = {"rows": [], "oob_values": None, "oob_ok": None, "avg_busbw": None, "warns": [], "failures": [],
           "transports": [], "gdr": False}
    columns = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            body = line.lstrip("#").split()
            if "size" in body and "busbw" in body:
                columns = body
            match = re.match(r"#\s*Out of bounds values\s*:\s*(\d+)\s+(\w+)", line)
            if match:
                out["oob_values"], out["oob_ok"] = int(match.group(1)), match.group(2).upper() == "OK"
            match = re.match(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)", line)
            if match:
                out["avg_busbw"] = float(match.group(1))
            continue
        if "NCCL WARN" in line:
            out["warns"].append(line)
        if NCCL_FAILURE_RE.search(line):
            out["failures"].append(line)
        for via in re.findall(r"via ((?:NET|P2P|SHM)/[\w/\-]+)", line):
            out["transports"].append(via)
            out["gdr"] = out["gdr"] or via.endswith("GDRDMA")
        row = _nccl_row(line.split(), columns)
        if row is not None:
            out["rows"].append(row)
    return out


def _nccl_row(tokens, columns):
    if not tokens or not tokens[0].isdigit():
        return None
    if columns is None or len(columns) != len(tokens):
        columns = {13: ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                        "algbw", "busbw", "#wrong"],
                   12: ["size", "count", "type", "redop", "time", "algbw", "busbw", "error", "time", "algbw",
                        "busbw", "error"]}.get(len(tokens))
        if columns is None:
            return None
    busbw = [to_float(t) for c, t in zip(columns, tokens) if c == "busbw"]
    # new builds count mismatching elements (#wrong); old ones print the max deviation (error), which is
    # within tolerance unless the Out-of-bounds line says FAILED
    wrong = [to_float(t) for c, t in zip(columns, tokens) if c in ("#wrong", "wrong")]
    if not busbw:
        return None
    return {"size": int(tokens[0]), "busbw": busbw, "wrong": wrong}


NCCL_TESTS_DIRS = ("/opt/nccl-tests/build", "/opt/nccl_tests/build", "/usr/local/bin", "/workspace/nccl-tests/build",
                   "/usr/local/nccl-tests/build")


def find_nccl_test(name):
    """An nccl-tests binary on PATH, in $NCCL_TESTS_DIR or the usual build directories."""
    found = shutil.which(name)
    if found:
        return found
    for directory in (os.environ.get("NCCL_TESTS_DIR", ""), *NCCL_TESTS_DIRS):
        path = os.path.join(directory, name)
        if directory and os.access(path, os.X_OK):
            return path
    return None


def run_nccl_test(check, argv, timeout, env=None):
    """Run nccl-tests and parse it; retry without -T on builds too old to know that option."""
    cmd = check.run(argv, timeout=timeout, env=env)
    if "-T" in argv and ("invalid option" in cmd.text or "unrecognized option" in cmd.text):
        at = argv.index("-T")
        cmd = check.run(argv[:at] + argv[at + 2:], timeout=timeout, env=env)
    return cmd, parse_nccl_tests(cmd.text)


def _nccl_failure_kind(line):
    lower = line.lower()
    if "timeout" in lower:
        return "hang"
    return "nccl_failure" if "nccl" in lower else "cuda_failure" if "cuda" in lower else "test_failure"


def judge_nccl_test(check, cmd, result):
    """Verdicts every nccl-tests check shares: launcher trouble (UNKNOWN), failures and hangs, wrong
    results (FAIL). Returns the largest-size row, with metrics size_bytes/busbw/avg_busbw_sweep set;
    finishes the check itself when there is no row to judge."""
    if LAUNCHER_FAILURE_RE.search(cmd.text) and not result["rows"]:
        check.unknown("the test did not start: %s" % next(
            line.strip() for line in cmd.text.splitlines() if LAUNCHER_FAILURE_RE.search(line)))
    specific = [line for line in result["failures"] if not line.startswith("..")]
    for line in specific or result["failures"][:1]:  # " .. host pid N: Test failure" only echoes the cause
        check.fail(_nccl_failure_kind(line), check.host, "%s failed: %s" % (os.path.basename(cmd.argv[0]),
                                                                             line.strip()), line)
    if cmd.timed_out and not result["rows"]:
        check.fail("hang", check.host, "%s did not finish in time (hang)" % os.path.basename(cmd.argv[0]))
    wrong = [r for r in result["rows"] if any(w for w in r["wrong"] if w)]
    if result["oob_ok"] is False:
        check.fail("data_corruption", check.host, "Out of bounds values : %s FAILED (wrong results: suspect "
                   "GPU/NVLink silent data corruption)" % result["oob_values"])
    elif wrong:
        check.fail("data_corruption", check.host, "#wrong %s at %d B (suspect GPU/NVLink silent data corruption)"
                   % (wrong[0]["wrong"], wrong[0]["size"]))
    if not result["rows"]:
        if not any(f["severity"] == "FAIL" for f in check.findings):
            check.unknown("no result rows in the output (%s)" % cmd.why())
        check.finish()
    largest = max(result["rows"], key=lambda r: r["size"])
    values = [b for b in largest["busbw"] if b is not None]
    check.metrics.update({"size_bytes": largest["size"], "busbw": round(sum(values) / max(len(values), 1), 2),
                          "avg_busbw_sweep": result["avg_busbw"]})
    return largest


# ---- GPU helpers (shared by the GPU checks) -----------------------------------------------------------
BDF_RE = re.compile(r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.([0-7]))?")


def norm_bdf(text):
    """Any PCI address spelling ('00000000:5D:00.0', 'PCI:0000:5d:00', '5d:00.0') -> '0000:5d:00', or None."""
    match = BDF_RE.search((text or "").replace("PCI:", ""))
    if not match:
        return None
    return "%04x:%s:%s" % (int(match.group(1) or "0", 16), match.group(2).lower(), match.group(3).lower())


def gpu_index_map(check):
    """{normalized BDF: NVML index} from nvidia-smi; else from lspci, whose PCI order is NVML's index order.

    Returns (mapping, source) where source is 'nvidia-smi', 'lspci' or None; uuids map too when known.
    """
    fields = ["index", "pci.bus_id", "uuid"]
    cmd = check.run(["nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,noheader"])
    mapping = {}
    for row in parse_query_csv(cmd.out, fields):
        index = to_int(row["index"])
        if index is not None and norm_bdf(row["pci.bus_id"]):
            mapping[norm_bdf(row["pci.bus_id"])] = index
            mapping[row["uuid"].lower()] = index
    lspci = check.run(["lspci", "-D", "-d", "10de:"])
    controllers = sorted(norm_bdf(line.split()[0]) for line in lspci.out.splitlines()
                         if " 3D controller" in line or " VGA compatible controller" in line)
    if mapping:
        # a GPU nvidia-smi cannot list (lost from the bus) keeps its PCI position as index, unless an
        # unbound GPU shifted NVML's numbering
        if all(mapping.get(bdf, index) == index for index, bdf in enumerate(controllers)):
            for index, bdf in enumerate(controllers):
                mapping.setdefault(bdf, index)
        return mapping, "nvidia-smi"
    if controllers:
        return {bdf: index for index, bdf in enumerate(controllers)}, "lspci"
    return {}, None


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
    stamp = _iso_epoch(text)
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


# (finding id, substring of the CUDA/torch error text, severity)
CUDA_ERROR_KINDS = [
    ("ecc_uncorrectable", "uncorrectable ECC error", "FAIL"),
    ("driver_insufficient", "driver version is insufficient for CUDA runtime version", "FAIL"),
    ("driver_insufficient", "driver on your system is too old", "FAIL"),
    ("driver_mismatch", "unsupported display driver / cuda driver combination", "FAIL"),
    ("fabric_not_initialized", "system not yet initialized", "FAIL"),
    ("no_kernel_image", "no kernel image is available for execution on the device", "FAIL"),
    ("invalid_device_ordinal", "invalid device ordinal", "FAIL"),
    ("no_driver", "Found no NVIDIA driver", "FAIL"),
    ("no_device", "no CUDA-capable device is detected", "FAIL"),
    ("no_device", "No CUDA GPUs are available", "FAIL"),
    ("illegal_memory_access", "an illegal memory access was encountered", "FAIL"),
    ("out_of_memory", "out of memory", "WARN"),
    ("cuda_unknown_error", "unknown error", "FAIL"),
]


# errors that say the software stack cannot use the GPU at all: a probe failing with one of these says nothing
# about the GPU's health
CUDA_SETUP_ERRORS = {"driver_insufficient", "driver_mismatch", "fabric_not_initialized", "no_kernel_image",
                     "invalid_device_ordinal", "no_driver", "no_device"}


def classify_cuda_error(text):
    """(finding id, severity) of a CUDA/torch error message."""
    lowered = text.lower()
    for kind, needle, severity in CUDA_ERROR_KINDS:
        if needle.lower() in lowered:
            return kind, severity
    return "cuda_error", "FAIL"


def nvsmi_error(cmd):
    """Why an nvidia-smi call gave no usable output (driver errors quoted as printed), or None."""
    if cmd.missing or cmd.timed_out:
        return cmd.why()
    for line in cmd.text.splitlines():
        if "Failed to initialize NVML" in line or "couldn't communicate with the NVIDIA driver" in line \
                or "is not a valid field" in line:
            return "nvidia-smi: " + line.strip()
    return None


NVB_RUNNING_RE = re.compile(r"^Running (\S+?)\.?$")
NVB_ROW_RE = re.compile(r"^\s*(\d+)((?:\s+(?:-?\d+(?:\.\d+)?|N/A))+)\s*$")
NVB_SUM_RE = re.compile(r"^SUM (\S+) ([\d.]+)")


def parse_nvbandwidth(text):
    """nvbandwidth output -> {test: {'title', 'columns', 'rows': {row: [value or None]}, 'sum'}}."""
    tests, current = {}, None
    for line in (text or "").splitlines():
        match = NVB_RUNNING_RE.match(line.strip())
        if match:
            current = tests.setdefault(match.group(1), {"title": "", "columns": [], "rows": {}, "sum": None})
            continue
        match = NVB_SUM_RE.match(line.strip())
        if match and match.group(1) in tests:
            tests[match.group(1)]["sum"] = float(match.group(2))
            current = None
            continue
        if current is None or not line.strip():
            continue
        if not current["title"] and ("bandwidth" in line or "latency" in line):
            current["title"] = line.strip()
            continue
        tokens = line.split()
        if not current["columns"] and tokens and all(t.isdigit() for t in tokens):
            current["columns"] = [int(t) for t in tokens]
            continue
        match = NVB_ROW_RE.match(line)
        if match and current["columns"]:
            current["rows"][int(match.group(1))] = [None if v == "N/A" else float(v) for v in match.group(2).split()]
    return tests
