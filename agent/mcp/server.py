"""The MCP tools and resources of `aidai mcp`, on the run service `aidai serve` uses (agent/server/service.py).

A run started here is a row in the same store, with the same audit log, checkpoints and ticket as one started from
the page; approvals and answers go through the same checks. What only MCP adds: checks run outside a diagnosis
(agent/mcp/checks.py), searches of the incident history and the taxonomy, and following a run by polling
`get_run` with a cursor (an assistant cannot hold a server-sent-event stream open between turns).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Literal, TypeVar

import anyio
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp_types import ToolAnnotations
from pydantic import Field, ValidationError

from agent.checks.manifest import load_manifest
from agent.mcp import checks as direct
from agent.mcp.auth import Identity, ServeTokens
from agent.server.config import Caller
from agent.server.inputs import BadInput, NewRun, RunRequest
from agent.server.service import RunService, summary
from agent.server.store import TERMINAL

MAX_WAIT_S = 60.0  # one get_run call waits at most this long for news (the client's request timeout is the limit)
POLL_S = 0.5  # the store is re-read this often while waiting: another process (aidai serve) may drive the run
MAX_EVENTS = 500
TICKET_CHANNEL = "mcp"  # the ticket tells its reader how to approve skipped checks through these tools

INSTRUCTIONS = """aidai diagnoses incidents of AI workloads (training and inference jobs) on GPU hosts: it runs
read-only verification checks on the hosts, walks a taxonomy of GPU/interconnect/system/software faults, and ends
with a root cause and a redacted escalation ticket.

Typical use: `server_info` (which hosts you may name, your role), then `start_diagnosis` with the incident text
and the error lines, then `get_run` with `after` = the last cursor and `wait_s` ~ 30 until `finished` is true,
answering when `waiting_for` is set (`approval`: an operator decides with `approve`; `feedback`: the run asks a
question, reply with `answer`), and finally `get_ticket`. `run_checks` runs single checks without a diagnosis;
`search_incidents` and `search_taxonomy` look up past incidents and fault classes. Only the hosts the server was
started with can be checked; active checks (GPU/network load tests) run only on a server started with
--allow-active, approved by an operator."""

T = TypeVar("T")


@dataclass
class McpSettings:
    allow_active: bool = False  # active/intrusive checks may run (approved by an operator); else passive only


def build_server(service: RunService, identity: Identity, settings: McpSettings, *,
                 tokens: ServeTokens | None = None, auth: AuthSettings | None = None) -> MCPServer:
    """The MCPServer with every tool and resource; `tokens`/`auth` (the SDK's AuthSettings) for HTTP only."""
    mcp: MCPServer = MCPServer("aidai", instructions=INSTRUCTIONS, version="0.1.0", token_verifier=tokens, auth=auth,
                               log_level="WARNING")
    config, store = service.config, service.store
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    async def call(fn: Callable[..., T], *args: Any, error: type[Exception] = ToolError, **kwargs: Any) -> T:
        """A blocking service call off the event loop; its refusal becomes the tool's (or resource's) error."""
        try:
            return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs))
        except BadInput as exc:
            raise error(str(exc)) from None

    def who(error: type[Exception] = ToolError) -> Caller:
        try:
            return identity.current()
        except BadInput as exc:
            raise error(str(exc)) from None

    # ---- what there is ------------------------------------------------------------------------------------
    @mcp.tool(annotations=read_only)
    async def server_info() -> dict[str, Any]:
        """Who you are to this server (name and role: viewer or operator), the hosts you may name in run_checks
        and start_diagnosis (exactly as written here; any other host is refused), whether active checks are
        allowed, and the reasoners available. Call it first."""
        caller = who()
        return {"caller": {"name": caller.name, "role": caller.role}, "hosts": list(config.targets),
                "allow_active": settings.allow_active, "llm": ["offline"] + (["openai"] if config.model else []),
                "roles": {"viewer": "read runs and tickets, start diagnoses (their active checks wait for an "
                                    "operator's approval), answer questions, run passive checks",
                          "operator": "also approves active checks (when the server allows them)"}}

    @mcp.tool(annotations=read_only)
    async def list_checks(tier: Annotated[Literal["passive", "active", "intrusive"] | None, Field(
            description="Only checks of this tier; leave out for all.")] = None) -> dict[str, Any]:
        """The verification checks this server can run (the manifest: nothing else ever runs). Each has an id, a
        tier, what it verifies, the taxonomy nodes it tests, what it needs and its usual cost in seconds.
        `passive` checks only read (logs, nvidia-smi, sysfs) and run for anyone; `active` ones load the GPUs or
        the network for a while and `intrusive` ones disturb running work: both need an operator's approval on a
        server that allows them (`runnable` says whether this server would run it for you)."""
        caller = who()
        out = []
        for spec in load_manifest().checks:
            if tier and spec.tier != tier:
                continue
            runnable = not spec.needs_approval or (settings.allow_active and caller.operator)
            out.append({"id": spec.id, "tier": spec.tier, "description": spec.description, "nodes": spec.nodes,
                        "needs": spec.needs, "expected_cost_s": spec.expected_cost_s, "runnable": runnable})
        return {"allow_active": settings.allow_active, "checks": out}

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True))
    async def run_checks(
        hosts: Annotated[list[str], Field(description="Host specs from server_info, e.g. [\"local\"].")],
        checks: Annotated[list[str], Field(description="Check ids from list_checks.")],
        approve_active: Annotated[bool, Field(description="Operators only, on a server started with "
                                                          "--allow-active: approve the active/intrusive checks "
                                                          "named in `checks`. Leave false otherwise.")] = False,
    ) -> dict[str, Any]:
        """Run verification checks on hosts now, without a diagnosis, and return each result: verdict (PASS,
        WARN, FAIL, or UNKNOWN when the check could not see: a missing tool, no GPU, a refused command; UNKNOWN is
        never a pass or a fail), summary, findings and metrics. Passive checks run for any caller. A batch with an
        active or intrusive check is refused unless the server allows active checks, you are an operator and
        approve_active is true. Every batch is written to an audit log under `audit_id`."""
        caller = who()
        specs = await call(direct.admitted, config, load_manifest(), hosts, checks, caller,
                           allow_active=settings.allow_active, approve_active=approve_active)
        return await call(direct.run_checks, config, hosts, specs, caller)

    # ---- diagnoses ----------------------------------------------------------------------------------------
    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                          open_world_hint=True))
    async def start_diagnosis(
        incident: Annotated[str, Field(description="What failed, in the user's words, with the error lines "
                                                   "(stack traces, Xid lines, NCCL errors) pasted verbatim.")],
        hosts: Annotated[list[str], Field(description="The hosts involved, as listed by server_info.")],
        environment: Annotated[str, Field(description="GPU model, driver, CUDA/NCCL/torch versions, if known.")
                               ] = "",
        approval: Annotated[Literal["ask", "none", "all"] | None, Field(
            description="Active checks during the run: `ask` stops the run for an operator's approval (see "
                        "approve), `none` never runs them, `all` runs them all (operators only). Leave out: `ask` "
                        "on a server that allows active checks, else `none` (the only choice there).")] = None,
        feedback_rounds: Annotated[int, Field(ge=0, le=3, description="Questions the run may ask (answer them "
                                                                      "with `answer`) before it escalates.")] = 1,
        llm: Annotated[Literal["offline", "openai"], Field(description="The reasoner: `offline` (rules and "
                                                                       "retrieval) or the server's model.")
                       ] = "offline",
    ) -> dict[str, Any]:
        """Start a diagnosis of an incident on the named hosts; returns its run id at once (status queued). Follow
        it with get_run. The run is the same as one started from aidai's web page: it appears there, in
        `aidai audit show ID`, and its ticket is the page's."""
        caller = who()
        policy = approval or ("ask" if settings.allow_active else "none")
        if policy != "none" and not settings.allow_active:
            raise ToolError(f"approval={policy}: active checks are not allowed on this server (an administrator "
                            "allows them with `aidai mcp --allow-active`); use approval=none or leave it out")
        try:
            request = RunRequest(incident=incident, hosts=hosts, environment=environment, approval=policy,
                                 feedback_rounds=feedback_rounds, llm=llm)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ToolError(f"invalid request: {'.'.join(map(str, first['loc'])) or 'body'}: {first['msg']}") from None
        new = NewRun(request=request)
        incident_, attachments = await call(service.prepare, new, caller)
        created = await call(service.create, new, incident_, attachments, caller)
        return {"id": created.id, "status": created.status, "approval": policy}

    @mcp.tool(annotations=read_only)
    async def get_run(
        run_id: Annotated[str, Field(description="The id start_diagnosis returned (or one from list_runs).")],
        after: Annotated[int, Field(ge=0, description="Return only events after this cursor: 0 the first time, "
                                                      "then the `cursor` of the previous answer.")] = 0,
        wait_s: Annotated[float, Field(ge=0, le=MAX_WAIT_S, description="Wait up to this many seconds for a new "
                                                                       "event (returns at once when there is "
                                                                       "one, or when the run waits or ended).")
                          ] = 0,
        max_events: Annotated[int, Field(ge=1, le=MAX_EVENTS, description="At most this many events.")] = 200,
    ) -> dict[str, Any]:
        """A run's status and its new events since `after`, to follow it step by step: call again with the
        returned `cursor` until `finished` is true (`more` true means further events are already there). Events
        say what the run does: checks started and their results, taxonomy judgements, questions, the
        conclusion. `waiting_for` is `approval` (an operator decides with approve which of the checks in
        `run.pending.checks` may run; each carries the server's advice `suggested`/`why`) or `feedback` (no root
        cause yet: `run.pending.question` asks what else you see, `run.pending.hypotheses` are suggestions; reply
        with answer). Once done, `run.result` holds the root causes and the evidence."""
        who()
        deadline = time.monotonic() + min(wait_s, MAX_WAIT_S)
        batch: list[tuple[int, dict[str, Any]]] = []
        while True:
            run = await call(service.record, run_id)
            batch = await call(store.events, run_id, after, max_events + 1)
            if batch or run["status"] in (*TERMINAL, "waiting") or time.monotonic() >= deadline:
                break
            await anyio.sleep(POLL_S)
        more = len(batch) > max_events
        batch = batch[:max_events]
        cursor = batch[-1][0] if batch else after
        return {"run": run, "events": [{"seq": seq, **event} for seq, event in batch], "cursor": cursor,
                "more": more, "finished": run["status"] in TERMINAL and not more,
                "waiting_for": run["waiting_for"]}

    @mcp.tool(annotations=read_only)
    async def list_runs(
        status: Annotated[Literal["queued", "running", "waiting", "done", "failed"] | None, Field(
            description="Only runs in this state.")] = None,
        limit: Annotated[int, Field(ge=1, le=1000, description="Newest first, at most this many.")] = 20,
    ) -> dict[str, Any]:
        """Recent diagnoses on this server (those started from the page or the API too): id, status, title,
        hosts, who started it, what it waits for and, once done, its root causes."""
        who()
        return {"runs": [summary(run) for run in await call(store.list, limit, status)]}

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True))
    async def approve(
        run_id: Annotated[str, Field(description="A run whose waiting_for is `approval`.")],
        checks: Annotated[dict[str, bool], Field(description="Check id -> run it, for the checks listed in the "
                                                             "run's pending approval; a check left out is not "
                                                             "run. {} declines them all.")],
    ) -> dict[str, Any]:
        """Answer a run's approval request (operators only): which of the active checks it asks for may run, on
        the hosts of the run. Approving any needs a server started with --allow-active; declining is always
        possible. The run then continues (follow it with get_run). The answer is recorded with your name in the
        run's events and audit log."""
        caller = who()
        if any(checks.values()) and not settings.allow_active:
            raise ToolError("active checks are not allowed on this server (an administrator allows them with "
                            "`aidai mcp --allow-active`); decline them with all false")
        return await call(service.approve, run_id, checks, caller)

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    async def answer(
        run_id: Annotated[str, Field(description="A run whose waiting_for is `feedback`.")],
        text: Annotated[str, Field(max_length=200_000, description="What else you see (new error lines, what "
                                                                   "changed, what was ruled out); empty "
                                                                   "escalates the run as unresolved.")],
    ) -> dict[str, Any]:
        """Answer the question a run asks when its checks found no root cause (waiting_for `feedback`; the
        question is run.pending.question in get_run); the run searches again with it. Any role may answer."""
        return await call(service.answer, run_id, text, who())

    @mcp.tool(annotations=read_only)
    async def get_ticket(
        run_id: Annotated[str, Field(description="A finished run (status done).")],
        format: Annotated[Literal["md", "json"], Field(description="`md`: Markdown to paste into a ticket or "
                                                                   "chat; `json`: the same fields as data.")
                          ] = "md",
    ) -> dict[str, Any]:
        """The escalation ticket of a finished run, redacted (hostnames, users and secrets replaced by stable
        placeholders): the root cause or why there is none, where, the evidence lines, the action and who acts,
        checks run, similar past incidents, next steps."""
        who()
        made = await call(service.ticket, run_id, format, TICKET_CHANNEL)
        return {"run_id": run_id, "format": format, "markdown" if format == "md" else "ticket": made}

    # ---- knowledge ----------------------------------------------------------------------------------------
    @mcp.tool(annotations=read_only)
    async def search_incidents(
        text: Annotated[str, Field(min_length=1, description="Incident text or error lines to match.")],
        k: Annotated[int, Field(ge=1, le=50, description="How many.")] = 5,
    ) -> dict[str, Any]:
        """Past incidents most similar to `text` (semantic search over the incident history this server learns
        from, seeded with known cases): id, root-cause label (a taxonomy node), similarity 0-1 and the text."""
        caller = who()
        retrieval = service.manager.retrieval(service.manager.options(
            list(config.targets), llm="offline", approval="none", feedback_rounds=0, operator=caller.name))
        found = await call(retrieval.similar, text, k)
        return {"incidents": [{"id": p.id, "label": p.label, "score": p.score, "source": p.source, "text": p.text}
                              for p in found]}

    @mcp.tool(annotations=read_only)
    async def search_taxonomy(
        text: Annotated[str, Field(description="Error lines or words to match against the fault classes.")] = "",
        node: Annotated[str, Field(description="A label such as GPU.MEMORY.UNCORRECTABLE_ECC to describe.")] = "",
        k: Annotated[int, Field(ge=1, le=50, description="How many matches for `text`.")] = 10,
    ) -> dict[str, Any]:
        """The fault taxonomy aidai diagnoses with. With `node`: that class's description, severity, the checks
        that test it, its runbook, Xid codes, parent and children. With `text`: the classes whose log signatures
        occur in it (strongest evidence), then those whose names and descriptions share its words."""
        who()
        from agent.mcp import taxonomy as tax

        if bool(text) == bool(node):
            raise ToolError("give either `text` or `node`")
        try:
            return tax.describe(node) if node else {"matches": tax.search(text, k)}
        except KeyError as exc:
            raise ToolError(str(exc.args[0])) from None

    # ---- resources ----------------------------------------------------------------------------------------
    @mcp.resource("aidai://runs", name="runs", mime_type="application/json",
                  description="The 100 newest diagnosis runs on this server (summaries).")
    async def runs_resource() -> str:
        who(ResourceError)
        return json.dumps({"runs": [summary(r) for r in await call(store.list, 100, None, error=ResourceError)]},
                          default=str)

    @mcp.resource("aidai://runs/{run_id}", name="run", mime_type="application/json",
                  description="One run: status, pending question or approval, approvals given, and the result "
                              "(root causes, evidence) once done.")
    async def run_resource(run_id: str) -> str:
        who(ResourceError)
        return json.dumps(await call(service.record, run_id, error=ResourceError), default=str)

    @mcp.resource("aidai://runs/{run_id}/ticket", name="ticket", mime_type="text/markdown",
                  description="The redacted escalation ticket of a finished run, as Markdown.")
    async def ticket_resource(run_id: str) -> str:
        who(ResourceError)
        return str(await call(service.ticket, run_id, "md", TICKET_CHANNEL, error=ResourceError))

    return mcp
