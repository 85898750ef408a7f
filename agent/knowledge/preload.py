"""Load what pipeline 1 needs (Chroma's client library, the ONNX encoder) on a background thread, so that a cold
CLI diagnosis does it while its main thread waits on the hosts (inventory, pre-triage) instead of afterwards.

Best effort: nothing is exported or built here (when the ONNX model was never exported the thread only imports
Chroma), errors are dropped (the main thread meets them again, and reports them, when it needs the same thing),
and everything it loads is what the diagnosis would load anyway, behind the same locks.
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

        from agent.knowledge import embeddings

        if embeddings.onnx_path() is not None:
            embeddings.get_model()
    except Exception:  # best effort: the diagnosis loads these itself and reports what fails
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
