"""The HTTP API and the web page (FastAPI). Routes validate, write the store and hand work to the RunManager."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError
from sse_starlette.sse import EventSourceResponse

from agent.audit import approval_decision
from agent.diagnosis import DiagnoseOptions, data_dir, new_run_id
from agent.report import Report
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
    build_incident,
    read_form,
    save_uploads,
)
from agent.server.metrics import CONTENT_TYPE, ServerMetrics
from agent.server.runs import RunManager
from agent.server.store import RunConflict, RunStore

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

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        broker.bind(asyncio.get_running_loop())
        manager.recover()
        yield
        manager.shutdown()

    app = FastAPI(title="aidai", version="0.1.0", lifespan=lifespan,
                  description="Diagnosis of AI-workload incidents on GPU hosts: start a run, stream its events, "
                              "answer its questions and approvals, fetch the report and the escalation ticket.")
    app.state.config, app.state.store, app.state.manager, app.state.metrics = config, store, manager, metrics
    app.add_middleware(BodyLimit, limit=config.max_upload_bytes)
    _errors(app)

    def get_run(run_id: str) -> dict[str, Any]:
        run = store.get(run_id)
        if run is None:
            raise HTTPException(404, f"no run {run_id!r}")
        return run

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
        if new.request.approval == "all" and not who.operator:
            raise HTTPException(403, f"{who.name} is a viewer: approval=all (run every active check) needs the "
                                     "operator role")
        if new.request.llm == "openai" and not config.model:
            raise BadInput("llm=openai: this server has no model configured (aidai serve --base-url --model)")
        if new.request.prometheus and not config.prometheus:
            raise BadInput("prometheus=true: this server has no Prometheus configured (aidai serve --prometheus URL)")
        incident, attachments = build_incident(new, config.targets)
        run_id = new_run_id()
        folder = server_dir(config) / "uploads" / run_id
        incident = await asyncio.to_thread(save_uploads, incident, attachments, folder)
        options = manager.options(list(new.request.hosts), llm=new.request.llm, approval=new.request.approval,
                                  feedback_rounds=new.request.feedback_rounds, operator=who.name,
                                  prometheus=config.prometheus if new.request.prometheus is not False else None)
        try:
            store.create(run_id, title=_first_line(incident.text), hosts=list(incident.hosts), created_by=who.name,
                         options=asdict(options), incident=incident.model_dump(mode="json"))
        except Exception:
            shutil.rmtree(folder, ignore_errors=True)  # no run row, no orphan upload
            raise
        manager.emit(run_id, {"type": "status", "status": "queued", "waiting_for": None, "by": who.name})
        metrics.started.inc()
        manager.submit(run_id)
        return RunCreated(id=run_id, status="queued")

    @app.get("/api/runs")
    def list_runs(who: Viewer, limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                  status: Literal["queued", "running", "waiting", "done", "failed"] | None = None,
                  ) -> dict[str, Any]:
        return {"runs": [_summary(run) for run in store.list(limit, status)]}

    @app.get("/api/runs/{run_id}")
    def get_one(run_id: str, who: Viewer) -> dict[str, Any]:
        run = get_run(run_id)
        out = _summary(run) | {"pending": run.get("pending"), "error": run.get("error"),
                               "environment": run["incident"].get("environment", ""),
                               "incident": run["incident"].get("text", ""), "result": None,
                               "approvals": [_decision(e) for e in store.events_of(run_id, "answered")
                                             if e.get("kind") == "approval"]}
        if run.get("report"):
            out["result"] = Report.model_validate(run["report"]).contract()
        return out

    @app.get("/api/runs/{run_id}/events")
    async def run_events(run_id: str, request: Request, who: Viewer,
                         after: Annotated[int, Query(ge=0)] = 0) -> EventSourceResponse:
        """Server-sent events, from event `after` (or the Last-Event-ID header) on; ends with `end` when the run
        is done or failed."""
        get_run(run_id)
        last = request.headers.get("last-event-id", "")
        start = int(last) if last.isdigit() else after
        return EventSourceResponse(events.stream(store, broker, run_id, start), ping=15)

    @app.post("/api/runs/{run_id}/approve", status_code=202)
    def approve(run_id: str, body: ApproveRequest, who: Operator) -> dict[str, Any]:
        """Answer an approval request: which of the listed active checks may run."""
        run = get_run(run_id)
        pending = run.get("pending") or {}
        asked = {c.get("id") for c in pending.get("checks", [])}
        if pending.get("kind") == "approval" and (extra := sorted(set(body.checks) - asked)):
            raise BadInput(f"check(s) {', '.join(extra)} were not asked for; asked: {', '.join(sorted(asked))}")
        answer = {c: bool(body.checks.get(c, False)) for c in sorted(asked)} | {"approved_by": who.name}
        _take(store, run_id, "approval", answer)
        decision = approval_decision(answer)
        manager.answered(run_id, {"kind": "approval", "by": who.name, "node": pending.get("node"), "checks": answer,
                                  **{k: decision[k] for k in ("decision", "approved", "declined")}})
        return {"id": run_id, "status": "queued", **decision}

    @app.post("/api/runs/{run_id}/answer", status_code=202)
    def answer(run_id: str, body: AnswerRequest, who: Viewer) -> dict[str, Any]:
        """Answer an exploration question (empty: escalate)."""
        get_run(run_id)
        if "\x00" in body.answer:
            raise BadInput("the answer contains NUL characters: send text", 415)
        _take(store, run_id, "feedback", body.answer)
        manager.answered(run_id, {"kind": "feedback", "by": who.name, "text": body.answer[:2000]})
        return {"id": run_id, "status": "queued"}

    @app.get("/api/runs/{run_id}/ticket", response_model=None)
    def ticket(run_id: str, who: Viewer, format: Literal["json", "md"] = "json",
               channel: Literal["page", "webhook"] = "page") -> dict[str, Any] | PlainTextResponse:
        """The redacted escalation ticket of a finished run (JSON, or Markdown with format=md). The Markdown says
        how to allow the active checks that were not approved in the words of its reader: `page` (the default,
        this server's page) or `webhook` (a ticket system)."""
        run = get_run(run_id)
        if not run.get("report"):
            raise HTTPException(409, f"run {run_id} is {run['status']}: the ticket exists once it is done")
        from agent.diagnosis import DiagnoseOptions, run_ticket
        from agent.ticket import render_markdown

        # the run's own mapping: the ticket names hosts and secrets by the placeholders the LLM saw
        data = run_ticket(Report.model_validate(run["report"]), DiagnoseOptions(**run["options"]))
        if format == "md":
            return PlainTextResponse(render_markdown(data, channel), media_type="text/markdown; charset=utf-8")
        return data

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


def _take(store: RunStore, run_id: str, kind: str, answer: Any) -> None:
    try:
        store.take_answer(run_id, kind, answer)
    except RunConflict as exc:
        raise HTTPException(409, str(exc)) from None


def _decision(event: dict[str, Any]) -> dict[str, Any]:
    """An approval answer as the run record shows it."""
    decision = approval_decision(event.get("checks") or {})
    return {"node": event.get("node"), "ts": event.get("ts"), **decision, "by": event.get("by") or decision["by"]}


def _first_line(text: str) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line[:160]


def _summary(run: dict[str, Any]) -> dict[str, Any]:
    report = run.get("report") or {}
    return {"id": run["id"], "status": run["status"], "created": run["created"], "updated": run["updated"],
            "title": run["title"], "hosts": run["hosts"], "created_by": run["created_by"],
            "waiting_for": (run.get("pending") or {}).get("kind"),
            "resolved": report.get("resolved") if report else None,
            "root_causes": [c["label"] for c in report.get("root_causes", [])] if report else []}


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
