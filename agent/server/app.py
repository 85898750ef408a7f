"""The HTTP API and the web page (FastAPI). Routes validate, write the store and hand work to the RunManager."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError
from sse_starlette.sse import EventSourceResponse

from agent import installation
from agent.options import DiagnoseOptions, data_dir
from agent.server import events
from agent.server.auth import Operator, Viewer
from agent.server.config import ServerConfig
from agent.server.inputs import (
    AnswerRequest,
    ApproveRequest,
    BadInput,
    BodyLimit,
    NewRun,
    RunCreated,
    RunRequest,
    read_form,
)
from agent.server.metrics import CONTENT_TYPE, ServerMetrics
from agent.server.runs import RunManager
from agent.server.service import RunService, summary
from agent.server.store import RunStore

STATIC = Path(__file__).parent / "static"
MAX_ERRORS_SHOWN = 3


def server_dir(config: ServerConfig) -> Path:
    return data_dir(DiagnoseOptions(data_dir=config.data_dir)) / "runs"


def create_app(config: ServerConfig) -> FastAPI:
    config.check()
    store = RunStore(server_dir(config) / "server.sqlite")
    broker = events.Broker()
    metrics = ServerMetrics(store, config.workers)
    manager = RunManager(config, store, broker, metrics)
    service = RunService(config, store, manager)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        broker.bind(asyncio.get_running_loop())
        manager.recover()
        yield
        manager.shutdown()

    app = FastAPI(title="aidai", version=installation.version(), lifespan=lifespan,
                  description="Diagnosis of AI-workload incidents on GPU hosts: start a run, stream its events, "
                              "answer its questions and approvals, fetch the report and the escalation ticket.")
    app.state.config, app.state.store, app.state.manager = config, store, manager
    app.state.metrics, app.state.service = metrics, service
    app.add_middleware(BodyLimit, limit=config.max_upload_bytes)
    _errors(app)

    # ---- the page -----------------------------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    # ---- Prometheus -----------------------------------------------------------------------------------------
    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics(who: Viewer) -> Response:
        """The server's metrics in Prometheus' text format. Like the API (it names hosts, checks and verdicts):
        open on loopback without tokens, a bearer token of any role once tokens are configured."""
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    # ---- API ----------------------------------------------------------------------------------------------
    @app.get("/api/me")
    def me(who: Viewer) -> dict[str, Any]:
        return {"name": who.name, "role": who.role}

    @app.get("/api/hosts")
    def hosts(who: Viewer) -> dict[str, Any]:
        return {"hosts": list(config.targets), "llm": ["offline"] + (["openai"] if config.model else [])}

    @app.post("/api/runs", status_code=201, response_model=RunCreated,
              openapi_extra={"requestBody": {"content": {
                  "application/json": {"schema": RunRequest.model_json_schema()},
                  "multipart/form-data": {"schema": {"type": "object", "properties": {
                      "incident": {"type": "string"}, "hosts": {"type": "array", "items": {"type": "string"}},
                      "environment": {"type": "string"}, "approval": {"type": "string"},
                      "file": {"type": "string", "format": "binary"},
                      "logs": {"type": "array", "items": {"type": "string", "format": "binary"}},
                      "telemetry": {"type": "string", "format": "binary"}}}}}, "required": True}})
    async def create_run(request: Request, who: Viewer) -> RunCreated:
        """Start a diagnosis: JSON `RunRequest`, or the same fields as a multipart form with uploads."""
        new = await _read_run(request)
        incident, attachments = service.prepare(new, who)
        return await asyncio.to_thread(service.create, new, incident, attachments, who)

    @app.get("/api/runs")
    def list_runs(who: Viewer, limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                  status: Literal["queued", "running", "waiting", "done", "failed"] | None = None,
                  ) -> dict[str, Any]:
        return {"runs": [summary(run) for run in store.list(limit, status)]}

    @app.get("/api/runs/{run_id}")
    def get_one(run_id: str, who: Viewer) -> dict[str, Any]:
        return service.record(run_id)

    @app.get("/api/runs/{run_id}/events")
    async def run_events(run_id: str, request: Request, who: Viewer,
                         after: Annotated[int, Query(ge=0)] = 0) -> EventSourceResponse:
        """Server-sent events, from event `after` (or the Last-Event-ID header) on; ends with `end` when the run
        is done or failed."""
        service.get(run_id)
        last = request.headers.get("last-event-id", "")
        start = int(last) if last.isdigit() else after
        return EventSourceResponse(events.stream(store, broker, run_id, start), ping=15)

    @app.post("/api/runs/{run_id}/approve", status_code=202)
    def approve(run_id: str, body: ApproveRequest, who: Operator) -> dict[str, Any]:
        """Answer an approval request: which of the listed active checks may run."""
        return service.approve(run_id, body.checks, who)

    @app.post("/api/runs/{run_id}/answer", status_code=202)
    def answer(run_id: str, body: AnswerRequest, who: Viewer) -> dict[str, Any]:
        """Answer an exploration question (empty: escalate)."""
        return service.answer(run_id, body.answer, who)

    @app.get("/api/runs/{run_id}/ticket", response_model=None)
    def ticket(run_id: str, who: Viewer, format: Literal["json", "md"] = "json",
               channel: Literal["page", "webhook"] = "page") -> dict[str, Any] | PlainTextResponse:
        """The redacted escalation ticket of a finished run (JSON, or Markdown with format=md). The Markdown says
        how to allow the active checks that were not approved in the words of its reader: `page` (the default,
        this server's page) or `webhook` (a ticket system)."""
        made = service.ticket(run_id, format, channel)
        if isinstance(made, str):
            return PlainTextResponse(made, media_type="text/markdown; charset=utf-8")
        return made

    return app


async def _read_run(request: Request) -> NewRun:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "multipart/form-data":
        try:
            form = await request.form(max_files=200, max_fields=100)
        except Exception as exc:  # starlette's parser: malformed multipart
            raise BadInput(f"malformed multipart form: {exc}") from None
        try:
            return await read_form(form)
        finally:
            await form.close()
    if kind != "application/json":
        raise BadInput("send the run as application/json or multipart/form-data", 415)
    body = await request.body()
    try:
        return NewRun(request=RunRequest.model_validate_json(body))
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None


def _errors(app: FastAPI) -> None:
    @app.exception_handler(BadInput)
    async def bad_input(request: Request, exc: BadInput) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            where = next(e for e in errors if e.get("type") == "json_invalid")
            ctx = where.get("ctx") or {}
            return JSONResponse({"detail": f"malformed JSON: {ctx.get('error', where.get('msg'))}"}, status_code=400)
        shown = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or 'body'}: {e.get('msg')}"
                          for e in errors[:MAX_ERRORS_SHOWN])
        return JSONResponse({"detail": f"invalid request: {shown}", "errors": jsonable(errors)}, status_code=422)


def jsonable(errors: list[Any]) -> list[dict[str, Any]]:
    return [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
            for e in errors]
