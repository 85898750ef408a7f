"""The job's Python environment on a simulated host: a simulated `torch`, package metadata, NCCL libraries.

pyfiles() writes into the host's PYTHONPATH dir a `torch` package that loads _faketorch (the probes
that import it are real) and `*.dist-info/METADATA` for torch, the NCCL wheel and the framework
packages, so importlib.metadata reports their versions. files() puts the libnccl files the host has
(a system copy on LD_LIBRARY_PATH, if any) and the probe process's /proc/self/maps into the sysroot.
"""

from __future__ import annotations

from agent.checks.versions import vkey
from agent.paths import PACKAGE_DIR
from agent.sim.state import HostState

COMMANDS: tuple[str, ...] = ()
SITE = "/usr/local/lib/python3.10/dist-packages"
TORCH_INIT = '''"""Simulated torch of an aidai simulated host: the probes importing it are real, this module is not."""
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, {repo!r})
from agent.sim.tools._faketorch import install as _install  # noqa: E402

_install(_sys.modules[__name__], str(_Path(__file__).resolve().parents[2] / "host.json"))
'''


def _dist_info(name: str, version: str) -> tuple[str, str]:
    folder = f"{name.replace('-', '_')}-{version}.dist-info/METADATA"
    return folder, f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: simulated package\n"


def nccl_wheel(host: HostState) -> str | None:
    """Name of the NCCL wheel torch depends on (nvidia-nccl-cu12 for a CUDA 12 build)."""
    cuda = host.software.torch_cuda
    return f"nvidia-nccl-cu{vkey(cuda)[0]}" if cuda and vkey(cuda) and vkey(cuda)[0] >= 11 else None


def pyfiles(host: HostState) -> dict[str, str]:
    sw = host.software
    out = {"torch/__init__.py": TORCH_INIT.format(repo=str(PACKAGE_DIR.parent))}
    packages = {"torch": sw.torch, **sw.python_packages}
    wheel = nccl_wheel(host)
    if wheel:
        packages[wheel] = sw.nccl
    for name, version in packages.items():
        path, text = _dist_info(name, version)
        out[path] = text
    return out


def loaded_nccl(host: HostState) -> str:
    """Path of the libnccl the job's process maps: a system copy on LD_LIBRARY_PATH shadows the wheel's."""
    sw = host.software
    if sw.system_nccl and sw.system_nccl_dir in host.env.get("LD_LIBRARY_PATH", ""):
        return f"{sw.system_nccl_dir}/libnccl.so.{sw.system_nccl}"
    return f"{SITE}/nvidia/nccl/lib/libnccl.so.2"


def files(host: HostState) -> dict[str, str | None]:
    sw = host.software
    out: dict[str, str | None] = {}
    if sw.system_nccl:
        out[f"{sw.system_nccl_dir}/libnccl.so.{sw.system_nccl}"] = None
        out[f"{sw.system_nccl_dir}/libnccl.so.2"] = None
    maps = [f"55d0c8a00000-55d0c8b2e000 r-xp 00000000 103:02 1841 /usr/bin/python{sw.python.rsplit('.', 1)[0]}"]
    if nccl_wheel(host):
        maps.append(f"7f3a2c000000-7f3a2e1c4000 r-xp 00000000 103:02 662811 {loaded_nccl(host)}")
        maps.append(f"7f3a31200000-7f3a5c1a8000 r-xp 00000000 103:02 662790 {SITE}/torch/lib/libtorch_cuda.so")
    out["/proc/self/maps"] = "\n".join(maps) + "\n"
    return out
