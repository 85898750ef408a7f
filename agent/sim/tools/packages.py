"""Installed software of a simulated host: dpkg-query, rpm, nvcc, docker and the NVIDIA Container Toolkit CLIs.

The NVIDIA packages are derived from the versions in HostState (driver, fabric manager, CUDA toolkit,
container toolkit), so a fault that changes a version changes every view of it; other packages
come from Software.packages.
"""

from __future__ import annotations

import fnmatch
import json

from agent.checks.versions import vkey
from agent.sim.state import HostState
from agent.sim.tools import ToolOutput, usage_error

COMMANDS = ("dpkg-query", "rpm", "nvcc", "nvidia-ctk", "nvidia-container-cli", "docker")
NVCC_BUILD = {"12": ("Tue_Aug_15_22:02:13_PDT_2023", "33191640_0"), "11": ("Wed_Sep_21_10:33:58_PDT_2022",
                                                                           "31833905_0")}
DEFAULT_DPKG_FORMAT = "${binary:Package}\t${Version}\n"


def package_list(host: HostState) -> dict[str, str]:
    """dpkg's view: package -> version."""
    pkgs: dict[str, str] = {}
    drv, sw = host.driver, host.software
    if drv.installed:
        branch = vkey(drv.version)[0]
        for name in ("nvidia-driver", "libnvidia-compute", "nvidia-dkms", "nvidia-kernel-common", "nvidia-utils"):
            pkgs[f"{name}-{branch}"] = f"{drv.version}-0ubuntu1"
    if host.fabric_manager.installed:
        pkgs[f"nvidia-fabricmanager-{vkey(host.fabric_manager.version)[0]}"] = f"{host.fabric_manager.version}-1"
    if sw.cuda_toolkit:
        major, minor = ([*vkey(sw.cuda_toolkit), 0])[:2]
        full = sw.cuda_toolkit if len(vkey(sw.cuda_toolkit)) >= 3 else f"{major}.{minor}.2"
        pkgs[f"cuda-toolkit-{major}-{minor}"] = f"{full}-1"
        pkgs[f"cuda-nvcc-{major}-{minor}"] = f"{full}-1"
    if sw.container_toolkit:
        for name in ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container1",
                     "libnvidia-container-tools"):
            pkgs[name] = f"{sw.container_toolkit}-1"
    pkgs.update(sw.packages)
    return pkgs


def _dpkg_query(host: HostState, argv: list[str]) -> ToolOutput:
    args = argv[1:]
    fmt, patterns, listing = DEFAULT_DPKG_FORMAT, [], False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-W", "--show"):
            listing = True
        elif arg.startswith(("-f=", "--showformat=")):
            fmt = arg.split("=", 1)[1]
        elif arg in ("-f", "--showformat") and i + 1 < len(args):
            fmt = args[i + 1]
            i += 1
        elif not arg.startswith("-"):
            patterns.append(arg)
        else:
            return usage_error("dpkg-query", argv)
        i += 1
    if not listing:
        return usage_error("dpkg-query", argv)
    fmt = fmt.replace("\\n", "\n").replace("\\t", "\t")
    pkgs = package_list(host)
    names = sorted(pkgs)
    if patterns:
        names = [n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns)]
        if not names:
            return ToolOutput("", "".join(f"dpkg-query: no packages found matching {p}\n" for p in patterns), 1)
    out = []
    for name in names:
        out.append(fmt.replace("${binary:Package}", name).replace("${Package}", name)
                   .replace("${Version}", pkgs[name]).replace("${db:Status-Abbrev}", "ii ")
                   .replace("${Status}", "install ok installed").replace("${Architecture}", "amd64"))
    return ToolOutput("".join(out))


def _nvcc(host: HostState, argv: list[str]) -> ToolOutput:
    if argv[1:] not in (["--version"], ["-V"]):
        return usage_error("nvcc", argv)
    toolkit = host.software.cuda_toolkit or ""
    major, minor = ([*vkey(toolkit), 0])[:2]
    built, build = NVCC_BUILD.get(str(major), NVCC_BUILD["12"])
    return ToolOutput(f"nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2023 NVIDIA Corporation\n"
                      f"Built on {built}\nCuda compilation tools, release {major}.{minor}, V{major}.{minor}.140\n"
                      f"Build cuda_{major}.{minor}.r{major}.{minor}/compiler.{build}\n")


def _toolkit(host: HostState, argv: list[str]) -> ToolOutput:
    version = host.software.container_toolkit or ""
    if argv[0] == "nvidia-ctk":
        if argv[1:] != ["--version"]:
            return usage_error("nvidia-ctk", argv)
        return ToolOutput(f"NVIDIA Container Toolkit CLI version {version}\n"
                          "commit: 5605d191332dcfeea802c4497360d60a65c7887e\n")
    if argv[1:] != ["--version"]:
        return usage_error("nvidia-container-cli", argv)
    return ToolOutput(f"cli-version: {version}\nlib-version: {version}\nbuild date: 2024-01-25T15:50+00:00\n"
                      "build revision: d2eb0afe86f0b643e33624ee64f065dd60e952d4\n"
                      "build compiler: x86_64-linux-gnu-gcc-7 7.5.0\nbuild platform: x86_64\n"
                      "build flags: -D_GNU_SOURCE -D_FORTIFY_SOURCE=2 -DNDEBUG -std=gnu11 -O2 -g\n")


def runtimes(host: HostState) -> list[str]:
    return ["io.containerd.runc.v2", "nvidia", "runc"] if host.container.nvidia_runtime else [
        "io.containerd.runc.v2", "runc"]


def _docker(host: HostState, argv: list[str]) -> ToolOutput:
    version = host.software.docker or ""
    if argv[1:] in (["--version"], ["-v"]):
        return ToolOutput(f"Docker version {version}, build afdd53b\n")
    if argv[1:] != ["info"]:
        return usage_error("docker", argv)
    client = (f"Client: Docker Engine - Community\n Version:    {version}\n Context:    default\n"
              " Debug Mode: false\n\n")
    if host.services.get("docker") != "active":
        return ToolOutput(client + "Server:\n", "ERROR: Cannot connect to the Docker daemon at "
                                                "unix:///var/run/docker.sock. Is the docker daemon running?\n", 1)
    mem_gib = 2015.4
    return ToolOutput(client + (
        f"Server:\n Containers: 3\n  Running: 1\n  Paused: 0\n  Stopped: 2\n Images: 12\n Server Version: {version}\n"
        " Storage Driver: overlay2\n  Backing Filesystem: extfs\n Logging Driver: json-file\n Cgroup Driver: systemd\n"
        " Cgroup Version: 2\n Plugins:\n  Volume: local\n  Network: bridge host ipvlan macvlan null overlay\n"
        f" Swarm: inactive\n Runtimes: {' '.join(runtimes(host))}\n Default Runtime: runc\n Init Binary: docker-init\n"
        f" Kernel Version: {host.software.kernel}\n Operating System: {host.software.os_name}\n OSType: linux\n"
        f" Architecture: x86_64\n CPUs: 192\n Total Memory: {mem_gib / 1024:.3f}TiB\n Name: {host.hostname}\n"
        " Docker Root Dir: /var/lib/docker\n Debug Mode: false\n Live Restore Enabled: false\n"))


def run(host: HostState, argv: list[str]) -> ToolOutput:
    command = argv[0]
    if command == "dpkg-query":
        return _dpkg_query(host, argv)
    if command == "nvcc":
        return _nvcc(host, argv)
    if command == "docker":
        return _docker(host, argv)
    if command == "rpm":
        return usage_error("rpm", argv)
    return _toolkit(host, argv)


def installed(host: HostState, command: str) -> bool:
    sw = host.software
    if command in sw.missing_tools:
        return False
    inside = host.container.inside
    return {"dpkg-query": "Ubuntu" in sw.os_name or "Debian" in sw.os_name,
            "rpm": not ("Ubuntu" in sw.os_name or "Debian" in sw.os_name),
            "nvcc": bool(sw.cuda_toolkit),
            "nvidia-ctk": bool(sw.container_toolkit) and not inside,
            "nvidia-container-cli": bool(sw.container_toolkit) and not inside,
            "docker": bool(sw.docker) and not inside}.get(command, True)


def files(host: HostState) -> dict[str, str | None]:
    sw = host.software
    out: dict[str, str | None] = {}
    if sw.docker and not host.container.inside:
        config: dict = {"log-driver": "json-file", "log-opts": {"max-size": "100m"}}
        if host.container.nvidia_runtime:
            config["runtimes"] = {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}
        out["/etc/docker/daemon.json"] = json.dumps(config, indent=4) + "\n"
    if sw.cuda_toolkit:
        major, minor = ([*vkey(sw.cuda_toolkit), 0])[:2]
        full = sw.cuda_toolkit if len(vkey(sw.cuda_toolkit)) >= 3 else f"{major}.{minor}.2"
        out["/usr/local/cuda/version.json"] = json.dumps({"cuda": {"name": "CUDA SDK", "version": full}}, indent=3)
    if sw.container_cuda_driver and host.container.inside:
        out[f"/usr/local/cuda/compat/libcuda.so.{sw.container_cuda_driver}"] = None
        out["/usr/local/cuda/compat/libcuda.so.1"] = None
    return out
