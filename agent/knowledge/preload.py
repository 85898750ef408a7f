"""Import Chroma's client library on a background thread, so that a cold CLI diagnosis does it while its main
thread builds the graph and waits on the hosts (inventory, pre-triage) instead of afterwards.

Only the import: the ONNX encoder is loaded by the main thread when the first text is embedded. Creating its
onnxruntime session on this thread made the process's peak RSS jump by ~110 MB in about one cold run in eight
(315 MB otherwise; measured with eval/bench_cold.py's os.wait4), and it saved no time once the hosts' work overlaps
the LangGraph import (agent/checks/runner.py `prefetch`): the two threads then only contend for the GIL.

Best effort: errors are dropped (the main thread meets them again, and reports them, when it imports the same
thing), and what it imports is what the diagnosis would import anyway, behind the same import locks.
"""

from __future__ import annotations

import os
import threading

_started = False
_guard = threading.Lock()


def _load() -> None:
    try:
        os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
        # the imports are the work: Chroma, and what a local client imports when it is created
        import chromadb.api.rust  # noqa: F401
    except Exception:  # best effort: the diagnosis imports it itself and reports what fails
        pass


def start() -> threading.Thread | None:
    """Start the background load once per process (None when it was already started)."""
    global _started
    with _guard:
        if _started:
            return None
        _started = True
    thread = threading.Thread(target=_load, name="aidai-preload", daemon=True)
    thread.start()
    return thread
