"""What a client may send, checked completely before anything is written.

A new run comes as JSON (`RunRequest`) or as a multipart form with the same fields plus files: `file` (an error
log appended to the incident text), `logs` (the job's log files, for the L4 localizer) and `telemetry` (a CSV of
host metrics, for Reveal). Text is read as the CLI reads it (agent/textinput.py): any encoding, control characters
dropped, a binary refused with 415 and the CLI's message, a large log excerpted and attached whole. The body size
is capped by `BodyLimit` for every request, before the app reads it.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import UploadFile
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent.incident import Incident, IncidentError
from agent.textinput import (
    NotText,
    check_text,
    clean_field,
    hold,
    joined,
    receive_bytes,
    receive_text,
    save_files,
)


class BadInput(ValueError):
    """A client error with its HTTP status (400 unless said otherwise)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    incident: str = Field(description="What failed, with the error lines")
    hosts: list[str] = Field(min_length=1, description="Host specs from GET /api/hosts")
    environment: str = Field("", description="GPU model, driver, CUDA/NCCL/torch versions")
    llm: Literal["offline", "openai"] = "offline"
    approval: Literal["ask", "none", "all"] = Field(
        "ask", description="active checks: ask an operator (an approval event), never run them, or run them all "
                           "(operator only)")
    feedback_rounds: int = Field(1, ge=0, le=3, description="questions asked before escalating")
    prometheus: bool | None = Field(
        None, description="read the server's Prometheus (aidai serve --prometheus) for pre-triage: default yes when "
                          "one is configured; true without one is refused; the URL is the server's, never the "
                          "caller's")


class RunCreated(BaseModel):
    id: str
    status: str


class ApproveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    checks: dict[str, bool] = Field(description="check id -> run it; a check left out is not run")


class AnswerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    answer: str = Field("", max_length=200_000, description="what else you see; empty escalates")


@dataclass
class Upload:
    kind: str  # file | logs | telemetry
    name: str
    data: bytes


@dataclass
class NewRun:
    request: RunRequest
    uploads: list[Upload] = field(default_factory=list)


SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
UPLOAD_FIELDS = ("file", "logs", "telemetry")


async def read_form(form: Any) -> NewRun:
    """A multipart form into RunRequest fields and uploads (hosts: repeated fields or comma-separated)."""
    fields: dict[str, Any] = {}
    uploads: list[Upload] = []
    for key, value in form.multi_items():
        if isinstance(value, UploadFile):
            if key not in UPLOAD_FIELDS:
                raise BadInput(f"unexpected file field {key!r}; valid: {', '.join(UPLOAD_FIELDS)}")
            data = await value.read()
            if data:  # an empty file input sends an empty part
                uploads.append(Upload(kind=key, name=value.filename or key, data=data))
        elif key == "hosts":
            fields.setdefault("hosts", []).extend(h.strip() for h in str(value).split(",") if h.strip())
        else:
            fields[key] = value
    if sum(u.kind in ("file", "telemetry") for u in uploads) > 2 or sum(u.kind == "file" for u in uploads) > 1:
        raise BadInput("at most one `file` and one `telemetry` upload")
    return NewRun(request=RunRequest.model_validate(fields), uploads=uploads)


def build_incident(new: NewRun, targets: list[str]) -> tuple[Incident, list[Upload]]:
    """The Incident (text + uploaded error log), its hosts checked against the server's; binary uploads refused."""
    request = new.request
    unknown = [h for h in request.hosts if h not in targets]
    if unknown:
        raise BadInput(f"unknown host {unknown[0]!r}: this server checks only {', '.join(targets)}")
    if len(set(request.hosts)) != len(request.hosts):
        raise BadInput("a host is named twice")
    try:
        parts = [receive_text(request.incident, "the incident field")]
        parts += [receive_bytes(u.data, u.name) for u in new.uploads if u.kind == "file"]
        environment = clean_field(request.environment, "the environment field")
        for upload in new.uploads:  # kept as sent, for the pre-triage tools: text only
            if upload.kind != "file":
                check_text(upload.data, upload.name)
    except NotText as exc:  # the CLI's message, with the status for "not a media type we take"
        raise BadInput(str(exc), 415) from None
    except IncidentError as exc:
        raise BadInput(str(exc)) from None
    try:
        incident = hold(Incident(text=joined(parts), environment=environment, hosts=list(request.hosts)), parts)
    except IncidentError as exc:
        raise BadInput(str(exc)) from None
    except ValueError as exc:  # pydantic wraps the validator's IncidentError
        raise BadInput(_first_error(exc)) from None
    return incident, [u for u in new.uploads if u.kind != "file"]


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors) and errors():
        error = errors()[0]
        cause = (error.get("ctx") or {}).get("error")
        return str(cause) if cause else str(error.get("msg", exc)).removeprefix("Value error, ")
    return str(exc)


def save_uploads(incident: Incident, uploads: list[Upload], folder: Path) -> Incident:
    """Write the attachments to FOLDER (through a temporary folder renamed at the end: all or nothing) and point
    the incident at them; a large error log's whole file (held by the incident, agent/textinput.py) goes to
    FOLDER/attachments."""
    if not uploads and not incident.files:
        return incident
    staging = folder.with_name(folder.name + ".part")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        attachments: dict[str, str] = dict(incident.attachments)
        for upload in uploads:
            name = SAFE_NAME.sub("_", Path(upload.name).name).strip("._") or upload.kind
            target = staging / upload.kind / name if upload.kind == "logs" else staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(upload.data)
            final = folder / target.relative_to(staging)
            attachments[upload.kind] = str(final.parent if upload.kind == "logs" else final)
        incident = save_files(incident, staging / "attachments", recorded=folder / "attachments")
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return incident.model_copy(update={"attachments": attachments})


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes gets 413 before the app sees any of it."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await self._refuse(send)
            return
        body: list[Message] = []
        size = 0
        while True:  # read it all (at most the limit), then hand it to the app
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            if size > self.limit:
                await self._refuse(send)
                return
            body.append(message)
            if not message.get("more_body"):
                break

        async def replay() -> Message:
            return body.pop(0) if body else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        detail = json.dumps({"detail": f"request body over the limit of {self.limit / 2**20:.1f} MiB (aidai "
                                       "serve --max-upload-mb): send the error excerpt, not the whole log"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length",
                                                                         str(len(detail)).encode())]})
        await send({"type": "http.response.body", "body": detail})
