#!/usr/bin/env python3
"""ofed_stack: the host's MLNX_OFED / DOCA-OFED release vs. the one HPC-X (and its UCX) was built for.

HPC-X packages are built per MLNX_OFED release and record it in their name
(hpcx-v2.17.1-gcc-MLNX_OFED_LINUX-23.10-1.1.9.0-ubuntu22.04-cuda12-x86_64) and in `ucx_info -v`'s
"Configured with" prefix. A different major.minor release on the host is the mismatch that makes UCX
drop the RDMA transports ("network device 'mlx5_0:1' is not available") or hang MPI/NCCL jobs.
"""

import os
import re

import checklib
import checklib_net

OFED_RE = re.compile(r"(?:MLNX_OFED_LINUX|OFED-internal|DOCA-OFED|OFED)-(\d+\.\d+)-([\d.]+\d)")
HPCX_DIRS = ("/opt", "/usr/local", "/opt/mellanox")


def host_ofed(check):
    """(release, full version, source) of the installed OFED, or (None, None, reason)."""
    cmd = check.run(["ofed_info", "-s"])
    match = OFED_RE.search(cmd.out) if cmd.ok else None
    if match:
        return match.group(1), "%s-%s" % match.groups(), "ofed_info -s"
    mod = check.run(["modinfo", "-F", "version", "mlx5_core"])
    version = re.match(r"(\d+\.\d+)-([\d.]+\d)", mod.out.strip()) if mod.ok else None
    if version:  # MLNX_OFED's mlx5_core carries its release; the inbox driver does not
        return version.group(1), "%s-%s" % version.groups(), "modinfo mlx5_core"
    if not mod.ok:
        # "no OFED" needs an answer from the module itself; no modinfo or no mlx5_core module tells nothing
        return None, None, "unknown: %s; %s" % (cmd.why(), mod.why())
    return None, None, "%s; mlx5_core has no OFED version (inbox driver?)" % cmd.why()


def hpcx_builds(check):
    """[(release, full, where)] for every HPC-X/UCX found: ucx_info -v, $HPCX_DIR, /opt/hpcx-*."""
    found = []
    cmd = check.run(["ucx_info", "-v"])
    if cmd.ok:
        match = OFED_RE.search(cmd.out)
        version = re.search(r"(?:Library version|UCT version)[:=]\s*([\d.]+)", cmd.out)
        check.metrics["ucx"] = version.group(1) if version else None
        if match:
            found.append((match.group(1), "%s-%s" % match.groups(), "ucx_info -v"))
    names = [os.environ.get(v, "") for v in ("HPCX_DIR", "HPCX_HOME")]
    for base in HPCX_DIRS:
        names += [base + "/" + n for n in check.listdir(base) if n.lower().startswith("hpcx")]
    for name in [n for n in names if n]:
        match = OFED_RE.search(os.path.basename(name.rstrip("/")))
        if match and all(full != "%s-%s" % match.groups() for _, full, _ in found):
            found.append((match.group(1), "%s-%s" % match.groups(), name))
        elif not match:
            check.info("hpcx_generic", name, "%s does not name the OFED it was built for" % name)
    return found, cmd


def body(check):
    if checklib_net.no_rdma_expected(check):
        check.finish(checklib_net.NO_RDMA + ": the OFED release HPC-X was built for does not matter")
    release, version, source = host_ofed(check)
    builds, ucx = hpcx_builds(check)
    check.metrics.update({"ofed": version, "ofed_source": source,
                          "hpcx_ofed": sorted({full for _, full, _ in builds})})
    if not builds:
        if any(f["id"] == "hpcx_generic" for f in check.findings) or ucx.ok:
            check.unknown("HPC-X/UCX found but the OFED it was built for is not recorded (host OFED: %s)"
                          % (version or "unknown"))
        check.unknown("no HPC-X/UCX found (ucx_info: %s; no hpcx* under %s)" % (ucx.why(), ", ".join(HPCX_DIRS)))
    if release is None and source.startswith("unknown: "):
        check.unknown("HPC-X was built for MLNX_OFED %s; the host's OFED release cannot be read (%s)"
                      % (builds[0][1], source[len("unknown: "):]))
    if release is None:
        check.warn("ofed_unknown", "host", "HPC-X was built for MLNX_OFED %s but no MLNX_OFED is installed (%s)"
                   % (builds[0][1], source))
        check.finish()
    for built, full, where in builds:
        if built != release:
            check.fail("ofed_hpcx_mismatch", where, "host runs OFED %s (%s) but %s was built for MLNX_OFED %s"
                       % (version, source, where, full))
    check.finish("OFED %s matches the release HPC-X/UCX was built for" % version)


if __name__ == "__main__":
    checklib.main("ofed_stack", body)
