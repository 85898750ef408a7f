"""The RDMA software stack's versions: MLNX_OFED's `ofed_info` and HPC-X's `ucx_info -v`, plus the
HPC-X install directory, whose name records the MLNX_OFED release the package was built for.
"""

from __future__ import annotations

import re

from agent.sim.state import HostState
from agent.sim.tools import ToolOutput, usage_error

COMMANDS = ("ofed_info", "ucx_info")
# MLNX_OFED release -> the HPC-X (and its UCX) built for it
HPCX_FOR_OFED = {"5.8": ("2.14", "1.14.0", "0f1c1b0"), "23.04": ("2.15", "1.14.1", "0a2e3b4"),
                 "23.07": ("2.16", "1.15.0", "5f4c6b8"), "23.10": ("2.17.1", "1.15.0", "5f4c6b8"),
                 "24.01": ("2.18", "1.16.0", "02432d3"), "24.04": ("2.19", "1.17.0", "7bb2722")}


def _release(ofed: str) -> str:
    """MLNX_OFED_LINUX-23.10-1.1.9.0 -> 23.10"""
    match = re.search(r"(\d+\.\d+)-\d", ofed)
    return match.group(1) if match else ofed


def hpcx_dir(host: HostState) -> str | None:
    ofed = host.software.hpcx_ofed
    if ofed is None:
        return None
    hpcx = HPCX_FOR_OFED.get(_release(ofed), ("2.17.1", "1.15.0", "5f4c6b8"))[0]
    return f"/opt/hpcx-v{hpcx}-gcc-{ofed}-ubuntu22.04-cuda12-x86_64"


def installed(host: HostState, command: str) -> bool:
    if command in host.software.missing_tools:
        return False
    if command == "ofed_info":
        return host.software.ofed is not None
    return host.software.hpcx_ofed is not None


def _ofed_info(host: HostState, argv: list[str]) -> ToolOutput:
    ofed = host.software.ofed or ""
    if argv[1:] == ["-s"]:
        return ToolOutput(f"{ofed}:\n")
    if argv[1:] == ["-n"]:
        return ToolOutput(ofed.removeprefix("MLNX_OFED_LINUX-") + "\n")
    if argv[1:]:
        return usage_error("ofed_info", argv)
    base = ofed.removeprefix("MLNX_OFED_LINUX-")
    return ToolOutput(f"{ofed} (OFED-{base.rsplit('.', 1)[0]}):\n\nclusterkit:\nmlnx_ofed_clusterkit/"
                      f"clusterkit-1.11.442-1.2310055.src.rpm\n\nmlnx-ofa_kernel:\nmlnx_ofed_mlnx-ofa_kernel/"
                      f"mlnx-ofa_kernel-{base.rsplit('.', 1)[0]}.src.rpm\n")


def _ucx_info(host: HostState, argv: list[str]) -> ToolOutput:
    if argv[1:] != ["-v"]:
        return usage_error("ucx_info", argv)
    ofed = host.software.hpcx_ofed or ""
    hpcx, ucx, rev = HPCX_FOR_OFED.get(_release(ofed), ("2.17.1", "1.15.0", "5f4c6b8"))
    prefix = f"/build-result/hpcx-v{hpcx}-gcc-{ofed}-ubuntu22.04-cuda12-x86_64/ucx"
    return ToolOutput(
        f"# Library version: {ucx}\n"
        f"# Library path: {hpcx_dir(host)}/ucx/lib/libucs.so.0\n"
        f"# API headers version: {ucx}\n"
        f"# Git branch '', revision {rev}\n"
        f"# Configured with: --disable-logging --disable-debug --disable-assertions --disable-params-check "
        f"--prefix={prefix} --with-knem --with-xpmem=/hpc/local/oss/xpmem/v2.7.1 --without-java "
        f"--enable-devel-headers --with-fuse3-static --with-cuda=/hpc/local/oss/cuda12.1.1 --with-gdrcopy "
        f"--with-verbs --with-rdmacm\n")


def run(host: HostState, argv: list[str]) -> ToolOutput:
    return _ofed_info(host, argv) if argv[0] == "ofed_info" else _ucx_info(host, argv)


def files(host: HostState) -> dict[str, str | None]:
    root = hpcx_dir(host)
    if root is None:
        return {}
    return {
        f"{root}/hpcx-init.sh": f"#!/bin/bash\nexport HPCX_DIR={root}\nexport HPCX_UCX_DIR=$HPCX_DIR/ucx\n",
        f"{root}/ucx/lib/libucp.so.0": None,
        f"{root}/ucx/lib/libucs.so.0": None,
    }
