"""The per-file parse/count stage on Dask (a LocalCluster by default, a scheduler address for a real cluster) or
in-process. `scan_file` is pure, so both paths give identical scans; the driver then builds the templates from the
union of the files' shapes in file order, whichever path produced them.

On a real cluster the workers open the files themselves: the log directory must be on storage they share.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os

from agent.l4.reader import LogFile
from agent.l4.scan import FileScan, scan_file

ENGINES = ("auto", "local", "dask")
# Starting a LocalCluster costs a few seconds of process start-up; below this much input one core is faster.
AUTO_DASK_BYTES = 256 * 2**20


def _size(files: list[LogFile]) -> int:
    total = 0
    for f in files:
        with contextlib.suppress(OSError):  # an unreadable file is reported by the scan, not here
            total += os.path.getsize(f.path)
    return total


def _dask_installed() -> bool:
    return importlib.util.find_spec("dask") is not None and importlib.util.find_spec("distributed") is not None


def scan_files(files: list[LogFile], engine: str = "auto", scheduler: str | None = None,
               workers: int | None = None) -> list[FileScan]:
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    if scheduler:
        engine = "dask"
    elif engine == "auto":
        # without the l4 extra a large input is scanned in-process: slower, same result
        engine = "dask" if _size(files) >= AUTO_DASK_BYTES and _dask_installed() else "local"
    if engine == "local":
        return [scan_file(f) for f in files]
    return _scan_dask(files, scheduler, workers)


def _scan_dask(files: list[LogFile], scheduler: str | None, workers: int | None) -> list[FileScan]:
    from dask.distributed import Client, LocalCluster

    if scheduler:
        with Client(scheduler) as client:
            return client.gather(client.map(scan_file, files, pure=False))
    n = workers or os.cpu_count() or 1
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        return client.gather(client.map(scan_file, files, pure=False))
