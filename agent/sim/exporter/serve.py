"""One dcgm-exporter per simulated host, as a real fleet runs one per node: each host of a scenario gets its own
HTTP listener serving GET /metrics, so a Prometheus that scrapes them labels each host by its `instance`.

Each scrape reads the host's host.json again (as the tool shims do on every call), so a test or a user that changes
the state between scrapes sees the counters move. A host whose driver or NVML is broken answers 500 with DCGM's
reason, the way a real exporter's scrape fails when DCGM cannot start (Prometheus records `up 0`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from agent.sim.exporter.render import DEFAULT_COUNTERS, Counter, driver_error, read_counters, render
from agent.sim.scenario import HOST_FILE, load_scenario
from agent.sim.state import HostState

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
INDEX = b"<html><head><title>GPU Exporter</title></head><body><h1>GPU Exporter</h1>" \
        b"<p><a href=\"./metrics\">Metrics</a></p></body></html>"


@dataclass
class HostExporter:
    name: str
    host_file: Path
    counters: list[Counter]
    hostname: bool = True
    began: float = field(default_factory=time.monotonic)
    server: ThreadingHTTPServer | None = None

    @property
    def address(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server's: bytes only for a unix socket's path
        return f"{host}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def scrape(self) -> tuple[int, str]:
        try:
            state = HostState.load(self.host_file)
        except (OSError, ValueError) as exc:
            return 500, f"cannot read the simulated host {self.host_file}: {exc}\n"
        problem = driver_error(state)
        if problem:
            return 500, f"DCGM: {problem}\n"
        return 200, render(state, self.counters, hostname=self.hostname, elapsed_s=time.monotonic() - self.began)


def _handler(exporter: HostExporter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                status, text = exporter.scrape()
                self._send(status, text.encode(), CONTENT_TYPE if status == 200 else "text/plain; charset=utf-8")
            elif path == "/":
                self._send(200, INDEX, "text/html; charset=utf-8")
            else:
                self._send(404, b"404 page not found\n", "text/plain; charset=utf-8")

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # scrapes every second would flood stderr
            return

    return Handler


class ExporterFleet:
    """Every host of the scenario at `root`, each on its own port: `port` for the first and the next ones after it,
    or 0 for a free port each."""

    def __init__(self, root: Path, *, address: str = "127.0.0.1", port: int = 9400,
                 counters: Path = DEFAULT_COUNTERS, hostname: bool = True):
        _, dirs = load_scenario(Path(root))
        fields = read_counters(counters)
        self.address = address
        self.port = port
        self.exporters = [HostExporter(name, host_dir / HOST_FILE, fields, hostname) for name, host_dir in dirs.items()]
        self._threads: list[threading.Thread] = []

    def start(self) -> dict[str, str]:
        """Bind and serve every host; {host name: metrics URL}. A port taken is an OSError naming it."""
        try:
            for offset, exporter in enumerate(self.exporters):
                port = self.port + offset if self.port else 0
                try:
                    exporter.server = ThreadingHTTPServer((self.address, port), _handler(exporter))
                except OSError as exc:
                    raise OSError(f"cannot listen on {self.address}:{port} for {exporter.name}: "
                                  f"{exc.strerror or exc}") from None
                exporter.server.daemon_threads = True
                thread = threading.Thread(target=exporter.server.serve_forever, name=f"exporter-{exporter.name}",
                                          daemon=True)
                thread.start()
                self._threads.append(thread)
        except OSError:
            self.stop()
            raise
        return {e.name: e.url for e in self.exporters}

    def stop(self) -> None:
        for exporter in self.exporters:
            if exporter.server is not None:
                exporter.server.shutdown()
                exporter.server.server_close()
                exporter.server = None
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()
