"""GPU helpers shared by the GPU checks: PCI bus ids and GPU indexes, CUDA error kinds, nvidia-smi failures,
nvbandwidth output. Shipped with checklib.py; python3 stdlib only (>= 3.8)."""

import re

import checklib_logs
from checklib import first_line, parse_query_csv, to_int

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


def pci_functions(check, vendors):
    """[(bdf, vendor, device, class)] of the PCI functions of `vendors` in /sys/bus/pci/devices (no tool needed),
    ids as 4 lower-case hex digits ('10de', '2330', '0302'); None when the bus is not readable here."""
    base = "/sys/bus/pci/devices"
    devices = check.listdir(base)
    if not devices:
        return None
    found = []
    for dev in devices:
        vendor = _hex4(check.read("%s/%s/vendor" % (base, dev)))
        if vendor in vendors:
            found.append((dev, vendor, _hex4(check.read("%s/%s/device" % (base, dev))),
                          _hex4(check.read("%s/%s/class" % (base, dev)))))
    return found


def _hex4(text):
    """'0x10de\n' -> '10de'; a class '0x030200' -> '0302'."""
    value = (text or "").strip().lower()
    return (value[2:] if value.startswith("0x") else value)[:4]


def nvidia_pci_gpus(check):
    """NVIDIA display/3D controllers on the PCI bus, or None when the bus is not readable here."""
    found = pci_functions(check, ("10de",))
    return None if found is None else [bdf for bdf, _, _, klass in found if klass.startswith("03")]


def gpus_expected(check):
    """Whether this host should have NVIDIA GPUs: the profile's gpu_count, else what the PCI bus shows;
    None when neither says."""
    count = check.expect("gpu_count", int)
    if count is not None:
        return count > 0
    seen = nvidia_pci_gpus(check)
    return None if seen is None else bool(seen)


def local_gpu_count(check):
    """(GPUs to run a test on, None) from params gpus, the profile or `nvidia-smi -L`; (None, why) when none says."""
    given = to_int(str(check.params.get("gpus") or ""))
    if given:
        return given, None
    expected = check.expect("gpu_count", int)
    if expected:
        return expected, None
    cmd = check.run(["nvidia-smi", "-L"])
    listed = len(re.findall(r"^GPU \d+:", cmd.out, re.MULTILINE))
    if listed:
        return listed, None
    return None, "no expectation for gpu_count on this host and nvidia-smi -L lists no GPU (%s)" % (
        nvsmi_error(cmd) or cmd.why())


UNIT_STATES = ("active", "inactive", "failed", "activating", "deactivating", "reloading", "maintenance", "refreshing")


def service_state(cmd):
    """The unit state `systemctl is-active` printed, or None when systemctl could not tell (missing, no systemd,
    no permission, or an answer that is not a state)."""
    if cmd.unusable or cmd.timed_out:
        return None
    state = first_line(cmd.out)
    return state if state in UNIT_STATES else None


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
    if cmd.missing or cmd.timed_out or cmd.refused:
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


# ---- dating counters ----------------------------------------------------------------------------------------
XID_LINE_RE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)")


def date_by_xids(check, xids_for, bus_of):
    """A counter says how many, not when: date each FAIL finding whose id is in `xids_for` by the newest Xid line
    of those codes for its GPU in the kernel log since boot (`bus_of(entity)` gives the GPU's bus id). When that
    Xid is older than the incident's window and none falls inside it, the finding becomes INFO `<id>_history`: an
    old problem the GPU still carries, not this incident's evidence. An undated finding (no readable log, no Xid
    line for it) stays as it is."""
    dated = [f for f in check.findings if f["severity"] == "FAIL" and f["id"] in xids_for]
    if not dated:
        return
    since, until = check.window(7200)
    lines, _ = checklib_logs.kernel_log(check, since_epoch=0, until_epoch=until)
    if not lines:
        return
    boot = checklib_logs.boot_epoch(check)
    newest = {}  # (bus, xid) -> epoch of its newest line
    for stamp, text in lines:
        match = XID_LINE_RE.search(text)
        if not match:
            continue
        stamp = stamp if stamp is not None else checklib_logs.line_epoch(text, boot)
        if stamp is not None:
            key = (norm_bdf(match.group(1)), int(match.group(2)))
            newest[key] = max(newest.get(key, stamp), stamp)
    for finding in dated:
        bus = norm_bdf(bus_of(finding["entity"]))
        times = [t for (b, x), t in newest.items() if b == bus and x in xids_for[finding["id"]]]
        if not times or max(times) >= since:
            continue
        finding["severity"] = "INFO"
        finding["id"] += "_history"
        finding["message"] += ("; its newest Xid is %.0f h before the incident and none is within the incident's "
                               "window: an old problem this GPU still carries, not this incident's evidence"
                               % ((check.incident_time() - max(times)) / 3600.0))


MEMORY_XIDS = (48, 63, 64, 94, 95)  # DBE, row remapping, contained/uncontained ECC (NVIDIA Xid catalogue)


def date_gpu_findings(check, xids_for):
    """date_by_xids for findings whose entity is `GPU<index>` (NVML index, mapped to the bus id by nvidia-smi)."""
    if not any(f["severity"] == "FAIL" and f["id"] in xids_for for f in check.findings):
        return
    index_of, _ = gpu_index_map(check)
    bus_of = {"GPU%d" % index: bdf for bdf, index in index_of.items() if ":" in bdf}
    date_by_xids(check, xids_for, bus_of.get)
