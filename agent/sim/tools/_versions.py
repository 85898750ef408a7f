"""Version arithmetic the simulator shares: driver/CUDA compatibility and real release numbers.

The tables mirror those in verification_scripts/framework_versions.py (the scripts are stdlib-only
and cannot import this); both follow the CUDA toolkit release notes.
"""

from __future__ import annotations

from agent.checks.versions import known_bad_entry, vkey

# minimum Linux driver for a CUDA runtime (11.x and 12.x through minor-version compatibility)
MIN_DRIVER = [((13, 0), "580.65.06"), ((12, 0), "525.60.13"), ((11, 0), "450.80.02"), ((10, 2), "440.33"),
              ((10, 1), "418.39"), ((10, 0), "410.48"), ((9, 2), "396.26"), ((9, 1), "390.46"), ((9, 0), "384.81"),
              ((8, 0), "375.26")]
# newest CUDA each driver branch supports (nvidia-smi "CUDA Version")
DRIVER_CUDA = [(580, "13.0"), (575, "12.9"), (570, "12.8"), (565, "12.7"), (560, "12.6"), (555, "12.5"),
               (550, "12.4"), (545, "12.3"), (535, "12.2"), (530, "12.1"), (525, "12.0"), (520, "11.8"),
               (515, "11.7"), (510, "11.6"), (495, "11.5"), (470, "11.4"), (465, "11.3"), (460, "11.2"),
               (455, "11.1"), (450, "11.0"), (440, "10.2"), (418, "10.1"), (410, "10.0"), (396, "9.2"),
               (390, "9.1"), (384, "9.0")]
# released versions a branch or minor ("525", "2.20") resolves to when a fault names only the prefix
RELEASES = {
    "driver": ["384.81", "390.48", "396.26", "410.48", "418.87.01", "440.33.01", "450.80.02", "470.223.02",
               "510.47.03", "525.85.12", "525.147.05", "535.104.05", "535.161.08", "550.54.15", "560.35.03",
               "570.172.08"],
    "nccl": ["2.14.3", "2.18.1", "2.18.5", "2.19.3", "2.20.5", "2.21.5", "2.22.3", "2.26.2", "2.29.2", "2.29.3"],
    "deepspeed": ["0.12.6", "0.13.1", "0.14.0"],
    "accelerate": ["0.19.0", "0.23.0", "0.25.0", "0.27.2"],
    "container_toolkit": ["1.14.0", "1.14.6", "1.17.0", "1.17.2", "1.17.7", "1.17.8"],
}
# the torch release that bundles an NCCL (pip wheels), for faults that swap NCCL realistically
TORCH_FOR_NCCL = {"2.14.3": "2.0.1", "2.18.1": "2.1.0", "2.19.3": "2.2.2", "2.20.5": "2.3.1", "2.21.5": "2.5.1",
                  "2.22.3": "2.6.0", "2.26.2": "2.7.0"}


def min_driver_for(cuda: str | None) -> str | None:
    if not cuda:
        return None
    key = vkey(cuda)[:2]
    return next((driver for ver, driver in MIN_DRIVER if key >= ver), None)


def driver_max_cuda(driver: str) -> str:
    branch = (vkey(driver) or (0,))[0]
    return next((cuda for floor, cuda in DRIVER_CUDA if branch >= floor), "8.0")


def known_bad_version(kind: str, requested: str | None) -> str:
    """The version of `kind` a fault installs: the requested one as known_bad.yaml lists it (or the newest listed
    release with that prefix), the requested one as is when the catalogue does not list it, else with no request
    the first listed release; ValueError when the request is not a version."""
    from agent.checks.manifest import load_known_bad

    table = load_known_bad()
    releases = RELEASES.get("driver" if kind == "driver_gsp" else kind, [])
    if requested:
        want = vkey(requested)
        # newest known release with the requested prefix first, so "2.20" or "525" become real versions
        candidates = [r for r in reversed(releases) if want and vkey(r)[:len(want)] == want] + [requested]
        for version in candidates:
            if vkey(version) and known_bad_entry(kind, version, table):
                return version
        if not vkey(requested):
            raise ValueError(f"{kind} {requested!r} is not a version")
        # a release nobody has catalogued as bad yet is a real case: the host runs it all the same
        return requested
    for release in releases:
        if known_bad_entry(kind, release, table):
            return release
    raise ValueError(f"known_bad.yaml lists no {kind} release the simulator knows")
