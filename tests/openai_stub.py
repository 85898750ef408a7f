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

Structured-output forms, as real servers differ in them (see agent/reasoning/structured.py):

        stub.refuse("json_schema", *REFUSALS["llama-cpp-python"])  # answer that form with a real server's error
        stub.ignore("json_object")  # take the form and answer prose, as a server that ignores it
        stub.form_of(stub.requests[0])  # "json_schema", "tools", "json_object+schema", "json_object" or "text"

A refused form is answered before the queue is touched, so scripted answers go to the forms the stub takes. A
request in the tools form gets its answer as the forced tool call's arguments, as servers that honour tools do.
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

# Real refusals, (status, JSON body), as the servers send them (bodies from their issue trackers and, for
# llama-cpp-python, from its server in `make test-llm`); the key names the server.
REFUSALS: dict[str, tuple[int, dict[str, Any]]] = {
    # llama-cpp-python 0.3.36 (python -m llama_cpp.server): json_schema fails its request validation with a 500
    "llama-cpp-python": (500, {"error": {"message": "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
                                                    "'response_format', 'type'), 'msg': \"Input should be 'text' or "
                                                    "'json_object'\", 'input': 'json_schema', 'ctx': {'expected': "
                                                    "\"'text' or 'json_object'\"}}\n\n  File \".../llama_cpp/server/"
                                                    "app.py\", line 376, in create_chat_completion\n    POST "
                                                    "/v1/chat/completions", "type": "internal_server_error",
                                         "param": None, "code": None}}),
    # llama.cpp's llama-server before json_schema support (and ik_llama.cpp)
    "llama-server-old": (500, {"error": {"code": 500, "type": "server_error", "message":
                                         'response_format type must be one of "text" or "json_object", but got: '
                                         "json_schema"}}),
    # Azure OpenAI with an api-version before 2024-08-01-preview
    "azure-old-api": (400, {"error": {"message": "response_format value as json_schema is enabled only for api "
                                                 "versions 2024-08-01-preview and later", "type": "", "param": "",
                                      "code": "BadRequest"}}),
    # Ollama with a model whose template has no tools
    "ollama-no-tools": (400, {"error": {"message": "registry.ollama.ai/library/gemma3:4b does not support tools",
                                        "type": "api_error", "param": None, "code": None}}),
    # OpenAI itself on llama-cpp-python's `schema` key
    "openai-unknown-key": (400, {"error": {"message": "Unknown parameter: 'response_format.schema'.",
                                           "type": "invalid_request_error", "param": "response_format.schema",
                                           "code": "unknown_parameter"}}),
    # LM Studio: json_object is not one of its types (a plain string as the error)
    "lm-studio": (400, {"error": "'response_format.type' must be 'json_schema' or 'text'"}),
    # text-generation-inference: its json_object wants the schema in `value`
    "tgi": (422, {"error": "Failed to deserialize the JSON body into the target type: response_format: missing "
                           "field `value` at line 1 column 168", "error_type": "validation"}),
}
PROSE = "Sure! The most likely cause is the GPU falling off the bus; I would check the PCIe link first."


def form_of(request: dict[str, Any]) -> str:
    """The structured-output form a chat request asks for."""
    if request.get("tools"):
        return "tools"
    fmt = request.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return "json_schema"
    if fmt.get("type") == "json_object":
        return "json_object+schema" if "schema" in fmt else "json_object"
    return "text"


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
        self.refused: dict[str, tuple[int, dict[str, Any]]] = {}  # form -> (status, body) it is answered with
        self.ignored: set[str] = set()  # forms answered with prose (a server that ignores them)
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

    def refuse(self, form: str, status: int, body: dict[str, Any] | str) -> None:
        """Answer every request in `form` with this HTTP error (a body, or a message for an OpenAI-style body)."""
        if isinstance(body, str):
            body = {"error": {"message": body, "type": "invalid_request_error", "code": None}}
        self.refused[form] = (status, body)

    def ignore(self, form: str) -> None:
        self.ignored.add(form)

    form_of = staticmethod(form_of)

    def forms(self) -> list[str]:
        return [form_of(r) for r in self.requests]

    def schema(self, index: int = -1) -> dict[str, Any]:
        """The JSON Schema a recorded request asked for, whatever its form."""
        request = self.requests[index]
        if request.get("tools"):
            tool: dict[str, Any] = request["tools"][0]["function"]["parameters"]
            return tool
        fmt = request["response_format"]
        schema: dict[str, Any] = fmt["json_schema"]["schema"] if fmt["type"] == "json_schema" else fmt["schema"]
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
                    form = form_of(request)
                    refusal = stub.refused.get(form)
                    if refusal is not None:
                        self._send(*refusal)
                        return
                    if form in stub.ignored:
                        reply = Reply(content=PROSE)
                        form = "text"
                    elif stub.replies:
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
                message: dict[str, Any] = {"role": "assistant", "content": content}
                finish = "stop"
                if form == "tools":  # the forced call carries the answer
                    name = request["tools"][0]["function"]["name"]
                    message = {"role": "assistant", "content": None, "tool_calls": [{
                        "id": f"call-{len(stub.requests)}", "type": "function",
                        "function": {"name": name, "arguments": content}}]}
                    finish = "tool_calls"
                self._send(200, {
                    "id": f"chatcmpl-stub-{len(stub.requests)}", "object": "chat.completion",
                    "created": int(time.time()), "model": request.get("model", stub.model),
                    "choices": [{"index": 0, "finish_reason": finish, "logprobs": None, "message": message}],
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
