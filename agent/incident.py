"""An incident as the customer reports it, and the summary the summarization agent makes of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, Field, PrivateAttr, field_validator

from agent.slurm.jobs import SlurmJob

# the incident text's hard limit; a log over agent/textinput.py's (smaller) limit is excerpted before it gets here
MAX_TEXT_BYTES = 8 * 1024 * 1024


class IncidentError(ValueError):
    """The incident cannot be diagnosed as given (empty, too large, unreadable)."""


class Attachment(BaseModel):
    """A log given whole with the incident but too large to be its text: the text has an excerpt of it (head,
    error lines with context, tail) and the whole file is saved next to the run, as received (bytes unchanged)."""

    name: str  # the file's name as given (stdin.log, incident.txt for a long text field)
    path: str  # where it is saved (the run's folder); "" until saved
    sha256: str  # of the bytes as received
    bytes: int
    excerpted_lines: int = 0  # lines of it that the incident text carries (the rest is only in the file)


class Incident(BaseModel):
    text: str
    environment: str = ""
    hosts: list[str] = Field(default_factory=list)  # host specs to run checks on (local, ssh://..., sim:DIR)
    # the Slurm jobs the hosts came from (`slurm:JOBID`): their nodes and the GPUs they held, as resolved at the start
    slurm_jobs: list[SlurmJob] = Field(default_factory=list)
    attachments: dict[str, str] = Field(default_factory=dict)  # kind -> path (logs dir, metrics CSV, host list)
    # when it happened (a ticket's open time will do): the checks judge events against it; None = now
    at: datetime | None = None
    # whole logs behind an excerpted text (agent/textinput.py); not `attachments`, which the pre-triage tools read
    files: list[Attachment] = Field(default_factory=list)
    # their bytes until they are saved next to the run (agent.textinput.save_files); never serialized
    _unsaved: dict[str, bytes] = PrivateAttr(default_factory=dict)

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, value: datetime | str | None) -> datetime | None:
        if value is None or isinstance(value, datetime):
            return value
        try:
            return datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        except ValueError:
            raise IncidentError(f"the incident time {value!r} is not an ISO 8601 time "
                                "(e.g. 2026-11-25T09:30:00Z)") from None

    @field_validator("at")
    @classmethod
    def _at_past(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        value = value if value.tzinfo else value.replace(tzinfo=UTC)  # a time without a zone is UTC
        if value > datetime.now(UTC) + timedelta(minutes=5):
            raise IncidentError(f"the incident time {value.isoformat()} is in the future")
        return value

    @field_validator("text")
    @classmethod
    def _text(cls, value: str) -> str:
        if not value.strip():
            raise IncidentError("the incident text is empty: describe what failed or pass --file with the error log")
        size = len(value.encode("utf-8", "replace"))
        if size > MAX_TEXT_BYTES:
            raise IncidentError(f"the incident text is {size / 2**20:.1f} MiB (limit {MAX_TEXT_BYTES // 2**20} MiB): "
                                "pass the error excerpt as text and the full log as an attachment")
        return value


class Entities(BaseModel):
    hosts: list[str] = Field(default_factory=list)
    gpus: list[str] = Field(default_factory=list)  # GPU indexes or PCI bus ids named in the text
    ranks: list[int] = Field(default_factory=list)
    xids: list[int] = Field(default_factory=list)
    devices: list[str] = Field(default_factory=list)  # NICs and HCAs: mlx5_0, ib0, eth0
    versions: dict[str, str] = Field(default_factory=dict)  # driver, cuda, nccl, torch ...
    error_codes: list[str] = Field(default_factory=list)  # CUDA/NCCL error names, DCGM_FR_*, errno names


class IncidentSummary(BaseModel):
    title: str
    key_lines: list[str] = Field(default_factory=list)  # the error lines, verbatim
    entities: Entities = Field(default_factory=Entities)
    query: str  # what retrieval and ranking look at: key lines first, then the description
    text: str = ""  # the incident text (kept whole for signature matching)
    environment: str = ""
