"""Server-sent events: the store's events of one run, replayed from a sequence number, then live.

Worker threads append to the store and call `Broker.notify`; each open stream waits on an asyncio.Event that
the notification sets on the event loop. The stream re-reads the store after every wake-up, so an event is
never lost between the replay and the live part, and a reconnect with Last-Event-ID continues exactly.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any

from agent.server.store import TERMINAL, RunStore

IDLE_RECHECK_S = 5.0  # a stream also re-reads the store this often, whatever the notifications say


class Broker:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._lock = threading.Lock()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def notify(self, run_id: str) -> None:
        """Thread-safe: wake every stream of the run."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with self._lock:
            waiters = list(self._waiters.get(run_id, ()))
        for waiter in waiters:
            loop.call_soon_threadsafe(waiter.set)

    def subscribe(self, run_id: str) -> asyncio.Event:
        event = asyncio.Event()
        with self._lock:
            self._waiters[run_id].add(event)
        return event

    def unsubscribe(self, run_id: str, event: asyncio.Event) -> None:
        with self._lock:
            self._waiters[run_id].discard(event)
            if not self._waiters[run_id]:
                del self._waiters[run_id]


async def stream(store: RunStore, broker: Broker, run_id: str, after: int = 0) -> AsyncIterator[dict[str, Any]]:
    """sse-starlette messages ({id, event, data}) until the run is finished and every event was sent."""
    wake = broker.subscribe(run_id)
    try:
        while True:
            wake.clear()
            run = await asyncio.to_thread(store.get, run_id)
            batch = await asyncio.to_thread(store.events, run_id, after)
            for seq, event in batch:
                after = seq
                yield {"id": str(seq), "event": str(event.get("type", "message")), "data": json.dumps(event)}
            if batch:
                continue  # there may be more than one batch
            if run is None or run["status"] in TERMINAL:
                yield {"event": "end", "data": json.dumps({"status": run["status"] if run else "missing"})}
                return
            with suppress(TimeoutError):  # re-read the store anyway
                await asyncio.wait_for(wake.wait(), IDLE_RECHECK_S)
    finally:
        broker.unsubscribe(run_id, wake)
