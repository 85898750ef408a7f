"""A deterministic OpenAI-compatible chat server for tests: scripted answers, recorded requests.

    with OpenAIStub() as stub:
        stub.reply_json({"status": "rejected", ...})  # queue the next answers, in order
        stub.responder = lambda request: "..."  # or compute every answer from the request
        stub.reply_text("garbage"); stub.reply_status(500); stub.reply_json({...}, delay=2.0)
        client = openai.OpenAI(base_url=stub.base_url, api_key="x")
        ...
        stub.requests[0]["response_format"]  # what the client sent, parsed

It serves POST /v1/chat/completions (and GET /v1/models) on 127.0.0.1 at a free port, from a thread. An
empty queue answers HTTP 500 "no scripted reply", so a test that makes more calls than it scripted sees it.
Token counts in `usage` are deterministic: characters of the messages / 4 and of the answer / 4.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    content: str | None = None  # the assistant message's content (JSON text or garbage)
    status: int = 200  # an HTTP error status when not 200
    message: str = ""  # the error message of an HTTP error
    delay: float = 0.0  # seconds to wait before answering (a timeout test)


class OpenAIStub:
    def __init__(self, model: str = "stub-model") -> None:
        self.model = model
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []  # the JSON bodies of the chat requests, in order
        self.headers: list[dict[str, str]] = []  # their HTTP headers (lower-case names)
        self.responder: Callable[[dict[str, Any]], str] | None = None  # answers when the queue is empty
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting -------------------------------------------------------------------------------------------

    def reply_json(self, obj: Any, delay: float = 0.0) -> None:
        self.replies.append(Reply(content=json.dumps(obj), delay=delay))

    def reply_text(self, text: str, delay: float = 0.0) -> None:
        self.replies.append(Reply(content=text, delay=delay))

    def reply_status(self, status: int, message: str = "", delay: float = 0.0) -> None:
        self.replies.append(Reply(status=status, message=message or f"stub error {status}", delay=delay))

    def schema(self, index: int = -1) -> dict[str, Any]:
        """The JSON Schema a recorded request asked for (json_schema mode)."""
        schema: dict[str, Any] = self.requests[index]["response_format"]["json_schema"]["schema"]
        return schema

    def prompt(self, index: int = -1) -> str:
        return "\n".join(str(m.get("content", "")) for m in self.requests[index]["messages"])

    # -- server ----------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start the stub first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> OpenAIStub:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": stub.model, "object": "model",
                                                                 "created": 0, "owned_by": "stub"}]})
                else:
                    self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
                    return
                try:
                    request = json.loads(raw)
                except ValueError:
                    self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
                    return
                with stub._lock:
                    stub.requests.append(request)
                    stub.headers.append({k.lower(): v for k, v in self.headers.items()})
                    if stub.replies:
                        reply = stub.replies.popleft()
                    elif stub.responder is not None:
                        reply = Reply(content=stub.responder(request))
                    else:
                        reply = Reply(status=500, message="no scripted reply")
                if reply.delay and stub._closing.wait(reply.delay):
                    return
                if reply.status != 200:
                    self._send(reply.status, {"error": {"message": reply.message, "type": "invalid_request_error"
                                                        if reply.status < 500 else "server_error", "code": None}})
                    return
                prompt = sum(len(str(m.get("content", ""))) for m in request.get("messages", []))
                content = reply.content or ""
                usage = {"prompt_tokens": prompt // 4, "completion_tokens": len(content) // 4}
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                self._send(200, {
                    "id": f"chatcmpl-stub-{len(stub.requests)}", "object": "chat.completion",
                    "created": int(time.time()), "model": request.get("model", stub.model),
                    "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": usage})

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="openai-stub", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
