"""The online diagnosis as a LangGraph StateGraph (AidAI Fig. 4/6, Algorithm 1):

summarize → inventory → pretriage ─no host can be checked→ conclude
                          └→ historical (pipeline 1) ─confirmed→ corroborate → conclude
                                   └→ dfs_init → dfs (pipeline 2, one step per super-step, explicit stack)
                                        ─confirmed→ corroborate → conclude
                                        ─confirmed, but none ties to the incident→ follow_reading (the incident's
                                                   likeliest causes still untested) → corroborate → conclude
                                        └→ widen (once: every branch with an untested leaf) → dfs_init
                                        └→ explore (pipeline 3) → feedback ─answer→ summarize again → dfs_init
                                                                           └→ conclude (escalate)

The inventory comes before any hypothesis: what each host is decides what its checks expect, and a host that
cannot be checked (unreachable, no NVIDIA GPU and no driver) runs nothing.
Every step is checkpointed; approvals of active checks and the user's feedback are LangGraph interrupts.
Every node runs inside a guard that counts what it spent (checks, seconds, LLM tokens, steps) against the run's
Limits; a limit reached, or the loop breaker, routes straight to `conclude`, which escalates with the reason.

LangGraph (and the LangChain/LangSmith modules it pulls in, most of a second of CPU) is imported by `build` and
where a node interrupts, not with this module: a cold CLI starts the hosts' inventory first and imports it while
the hosts work (agent/diagnosis.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agent import inventory as inv
from agent import limits as L
from agent.agents import conclusion, execution, planning, reflection, summarization
from agent.agents.attribution import Attribution, attribute
from agent.audit import check_event
from agent.checks.runner import CheckRunner
from agent.evidence import unexplained
from agent.graph.explain import cannot_check_explanation, nothing_checkable, stopped_explanation
from agent.graph.state import (
    DiagnosisState,
    Frame,
    dump_result,
    incident_time,
    load_judgements,
    load_memory,
    load_results,
    result_key,
)
from agent.incident import Incident, IncidentSummary
from agent.models import CheckResult, ToolResult
from agent.reasoning.base import KBPassage, LeafJudgement, Observation, PastIncident, Reasoner
from agent.taxonomy import Taxonomy

Emit = Callable[[dict[str, Any]], None]
Approval = Literal["all", "none", "ask"]
PreTriage = Callable[[Incident], ToolResult | None]  # None: nothing for this tool in the incident
# keeps the evidence of the confirmed causes ((role, judgement): root_cause | follows | also_found) before the
# conclusion is told to anyone; returns what the report and ticket say about it (agent/bundle.py's BundleInfo), or
# None
Preserve = Callable[[DiagnosisState, list[tuple[str, LeafJudgement]]], dict[str, Any] | None]


@dataclass
class GraphTools:
    """What the graph's nodes act with; none of it is checkpointed (the state is)."""

    taxonomy: Taxonomy
    reasoner: Reasoner
    runner: CheckRunner
    retrieve: planning.Retrieve | None = None
    kb_query: Callable[[str, int], list[KBPassage]] | None = None
    pretriage: list[PreTriage] = field(default_factory=list)
    emit: Emit = lambda event: None
    approval: Approval = "none"
    max_feedback_rounds: int = 0  # 0: nobody to ask (batch runs); the chat asks
    limits: L.Limits = field(default_factory=L.Limits)
    audit: Emit = lambda event: None  # the run's append-only audit log (agent/audit.py)
    operator: str = ""  # who started the run: the approver of record under the policies all/none
    # reads the incident before any check, for attribution (default: the reasoner); the Diagnoser gives the offline
    # reasoner, so which confirmed cause is claimed rests on the same deterministic reading whatever the model
    reader: Reasoner | None = None
    preserve: Preserve | None = None  # the evidence bundle (agent/bundle.py), written by the Diagnoser


class DiagnosisGraph:
    def __init__(self, tools: GraphTools):
        self.t = tools
        # what the node being run has spent so far, and a limit it hit; nodes run one at a time
        self._spent: L.Spent = {}
        self._stop: L.Stop | None = None
        self._node_began = 0.0
        self._node_tokens = 0
        self._label = ""  # the node whose checks run now (for the audit log)
        # the loop breaker's memory: (host, check) executed by this process, and those in the checkpoint (the
        # cache holds both, so executing one again is a loop; a pre-triage check lost with a killed process is not)
        self._ran_here: set[str] = set()
        self._checkpointed: set[str] = set()
        tools.runner.admit = self._admit
        tools.runner.listeners.append(self._ran)

    # ---- limits and the loop breaker ----------------------------------------------------------------------
    def _tokens(self) -> int:
        usage = getattr(self.t.reasoner, "usage", None)
        return int(getattr(usage, "tokens", 0) or 0)

    def _guarded(self, name: str, node: Callable[[DiagnosisState], dict[str, Any]],
                 ) -> Callable[[DiagnosisState], dict[str, Any]]:
        """The node, skipped once the run is stopped (conclude excepted), with what it spent added to the state
        and the limits checked after it: a limit reached sets `stopped`, which every router obeys."""

        def guarded(state: DiagnosisState) -> dict[str, Any]:
            if state.get("stopped") and name != "conclude":
                return {}
            self._spent, self._stop, self._label = L.add(state.get("spent", {})), None, name
            self._adopt_inventory(state)
            if "incident_at" not in self.t.runner.params and (at := incident_time(state["incident"])) is not None:
                # the checks judge events against the incident's time, not the moment they run
                self.t.runner.params["incident_at"] = at
            self._checkpointed = set(state.get("results", {}))
            self._node_began, self._node_tokens = time.perf_counter(), self._tokens()
            update = node(state)
            spent = L.add(self._spent, wall_s=time.perf_counter() - self._node_began,
                          tokens=self._tokens() - self._node_tokens, steps=1)
            update = {**update, "spent": spent}
            if name != "conclude" and not state.get("stopped"):
                stop = self._stop or self.t.limits.exceeded(spent)
                if stop is not None:
                    update["stopped"] = stop
                    self.t.emit({"type": "stopped", "node": name, **stop})
                    self.t.audit({"event": "stopped", "node": name, **stop, "spent": dict(spent)})
            return update

        return guarded

    def _adopt_inventory(self, state: DiagnosisState) -> None:
        """A resumed run's hosts are what its checkpoint says they are: the inventory is not taken again."""
        runner = self.t.runner
        for host, saved in state.get("inventory", {}).items():
            if host in runner.executors and host not in runner.expectations:
                runner.adopt(inv.HostInventory.model_validate(saved["inventory"]),
                             inv.Expectations.model_validate(saved["expectations"]))

    def _halt(self, stop: L.Stop) -> None:
        if self._stop is None:
            self._stop = stop

    # ---- shared steps -------------------------------------------------------------------------------------
    def _summary(self, state: DiagnosisState) -> IncidentSummary:
        return IncidentSummary.model_validate(state["summary"])

    def _execute(self, state: DiagnosisState, label: str, costly_too: bool = False,
                 ) -> tuple[list[CheckResult], dict[str, Any]]:
        """Run the node's passive checks, then its active ones if they are still needed or `costly_too` (asking
        for approval first unless already decided: an interrupt when the policy is ask)."""
        runner = self.t.runner
        for result in load_results(state):  # a resumed run reuses what the checkpoint already holds
            runner.cache.setdefault((result.host, result.check), result)
        cheap, costly = execution.by_tier(runner, execution.checks_for(self.t.taxonomy, runner, label))
        approvals = dict(state.get("approvals", {}))
        approvers = dict(state.get("approved_by", {}))
        results = self._run(label, cheap)
        if costly and not self._stop and (costly_too or execution.costly_needed(self.t.taxonomy, label, results)):
            approvals, approvers = self._decide(state, label, costly, "the read-only checks did not decide it: the "
                                                                      "test confirms or rejects it")
            runner.approve = lambda spec, host: approvals.get(spec.id, False)
            results += self._run(label, costly)
        elif costly and not self._stop:
            self.t.emit({"type": "skipped", "node": label, "checks": costly,
                         "why": "the passive checks already decided it"})
        stored = dict(state.get("results", {}))
        stored.update({result_key(r): dump_result(r) for r in results})
        return results, {"results": stored, "approvals": approvals, "approved_by": approvers}

    def _decide(self, state: DiagnosisState, node: str, checks: list[str], purpose: str,
                ) -> tuple[dict[str, bool], dict[str, str]]:
        """(approvals, approvers) with `checks` decided (agents/execution.py)."""
        return execution.decide(self.t.runner.manifest, self.t.approval, self.t.operator, self.t.audit,
                                dict(state.get("approvals", {})), dict(state.get("approved_by", {})), node, checks,
                                purpose)

    def _run(self, label: str, checks: list[str]) -> list[CheckResult]:
        if not checks or self._stop:
            return []
        self.t.runner.allowed(checks)  # an id outside the manifest is refused before anything runs
        self._label = label
        self.t.emit({"type": "checks", "node": label, "checks": checks})
        results = execution.run_checks(self.t.runner, checks)
        for result in results:
            self.t.emit({"type": "result", "node": label, "check": result.check, "host": result.host,
                         "verdict": result.verdict.value, "summary": result.summary, "cached": result.cached,
                         "duration_s": result.duration_s})
        return results

    def _admit(self, jobs: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """The runner asks before executing anything (the graph's checks and the pre-triage tools' alike): within
        the limits, a batch runs only the jobs that fit; a (host, check) that already ran is a loop."""
        if self._stop:
            return {job: f"the investigation stopped ({self._stop['limit']})" for job in jobs}
        elapsed = time.perf_counter() - self._node_began
        if stop := self.t.limits.exceeded(L.add(self._spent, tokens=self._tokens() - self._node_tokens),
                                          extra_wall_s=elapsed):
            self._halt(stop)
            return {job: stop["message"] for job in jobs}
        refused: dict[tuple[str, str], str] = {}
        looping = {f"{h}|{c}" for h, c in jobs} & (self._ran_here | self._checkpointed)
        if looping:
            shown = ", ".join(sorted(k.replace("|", " on ", 1) for k in looping)[:3])
            self._halt(L.stop("loop", f"loop breaker: {shown} would run again; the result is already known"))
            refused.update({job: "loop breaker: it already ran" for job in jobs if f"{job[0]}|{job[1]}" in looping})
        left = self.t.limits.checks_left(self._spent)
        rest = [job for job in jobs if job not in refused]
        if left is not None and len(rest) > left:
            over = rest[left:]
            self._halt(L.stop("max_checks", f"check limit reached: {self._spent.get('checks', 0) + left} of at most "
                                            f"{self.t.limits.max_checks} check runs; not run: "
                                            f"{', '.join(sorted({c for _, c in over}))}"))
            refused.update({job: f"check limit reached ({self.t.limits.max_checks} check runs)" for job in over})
        return refused

    def _ran(self, result: CheckResult) -> None:
        """A check executed: count it against the limits and write it to the audit log."""
        runner = self.t.runner
        self._spent = L.add(self._spent, checks=1)
        self._ran_here.add(result_key(result))
        self.t.audit(check_event(result, self._label, runner.exit_codes.get((result.host, result.check))))

    def _judge(self, state: DiagnosisState, label: str, pipeline: int) -> LeafJudgement:
        judgement = reflection.validate(self.t.reasoner, self.t.taxonomy, self._summary(state), label,
                                        load_results(state))
        self.t.emit({"type": "judgement", "pipeline": pipeline, **judgement.model_dump(mode="json")})
        return judgement

    @staticmethod
    def _trace(state: DiagnosisState, pipeline: int, node: str, action: str, detail: str = "") -> list[dict]:
        return [*state.get("path", []), {"pipeline": pipeline, "node": node or "ROOT", "action": action,
                                         "detail": detail}]

    # ---- nodes --------------------------------------------------------------------------------------------
    def summarize(self, state: DiagnosisState) -> dict[str, Any]:
        incident = Incident.model_validate(state["incident"])
        summary = summarization.summarize(self.t.reasoner, incident, state.get("feedback"))
        self.t.emit({"type": "summary", **summary.model_dump(mode="json", exclude={"text", "query"})})
        return {"summary": summary.model_dump(mode="json")}

    def inventory(self, state: DiagnosisState) -> dict[str, Any]:
        """Each host's inventory (passive reads) and the expectations its checks get, before any hypothesis."""
        runner = self.t.runner
        taken = runner.take_inventory()
        hosts = [e.model_dump(mode="json", exclude={"values"}) for e in taken.values()]
        self.t.emit({"type": "inventory", "hosts": hosts})
        for host in hosts:
            self.t.audit({"event": "inventory", **host})
        return {"inventory": {host: {"inventory": runner.inventories[host].model_dump(mode="json"),
                                     "expectations": e.model_dump(mode="json")} for host, e in taken.items()}}

    def pretriage(self, state: DiagnosisState) -> dict[str, Any]:
        """Every pre-triage tool on the incident's attachments; a tool that fails is reported, never fatal."""
        incident = Incident.model_validate(state["incident"])
        found: list[dict[str, Any]] = []
        priors: dict[str, float] = {}
        known = set(self.t.taxonomy.labels())
        for tool in self.t.pretriage:
            began = time.perf_counter()
            try:
                result = tool(incident)
            except Exception as exc:  # a tool's bug must not stop the diagnosis; the ticket shows it
                result = ToolResult(tool=getattr(tool, "__name__", "tool"), status="error",
                                    reason=f"{type(exc).__name__}: {exc}"[:500])
            if result is None:
                continue
            if not result.duration_s:
                result.duration_s = round(time.perf_counter() - began, 3)
            found.append(result.model_dump(mode="json"))
            for label, score in result.priors.items():
                if label in known:
                    priors[label] = max(priors.get(label, 0.0), score)
        update: dict[str, Any] = {"pretriage": found, "pretriage_priors": priors}
        suspects = [h for r in found if r["status"] == "ok" for h in r["hosts"][:5]]
        if suspects:  # the hosts the tools point at come first in the summary: check them first
            summary = self._summary(state)
            summary.entities.hosts = list(dict.fromkeys([*suspects, *summary.entities.hosts]))
            update["summary"] = summary.model_dump(mode="json")
        if found:
            self.t.emit({"type": "pretriage", "results": found})
        return update

    def historical(self, state: DiagnosisState) -> dict[str, Any]:
        summary = self._summary(state)
        similar = (planning.similar_incidents(self.t.reasoner, summary, self.t.retrieve, self.t.taxonomy)
                   if self.t.retrieve else [])
        self.t.emit({"type": "history", "similar": [p.model_dump(mode="json") for p in similar[:5]]})
        update: dict[str, Any] = {"similar": [p.model_dump(mode="json") for p in similar],
                                  "priors": planning.priors(similar, state.get("pretriage_priors"))}
        judgements = load_judgements(state)
        path = list(state.get("path", []))
        memory: list[dict[str, Any]] = []
        hypotheses = planning.history_hypotheses(similar)
        tested: set[str] = set()
        while hypotheses and not self._stop:
            label = hypotheses.pop(0)
            tested.add(label)
            results, changes = self._execute({**state, **update}, label)
            update.update(changes)
            memory += [Observation(node=label, result=r).model_dump(mode="json") for r in results]
            judgement = self._judge({**state, **update}, label, 1)
            judgements = [j for j in judgements if j.label != label] + [judgement]
            path.append({"pipeline": 1, "node": label, "action": judgement.status, "detail": judgement.why})
            if judgement.status == "confirmed":
                # a confirmed leaf's siblings share its checks: test them too, for secondary causes
                siblings = [n.label for n in self.t.taxonomy.node(label).siblings if n.is_leaf]
                hypotheses += [s for s in siblings if s not in tested and s not in hypotheses]
        confirmed = [j for j in judgements if j.status == "confirmed"]
        if confirmed and (left := unexplained(load_results({**state, **update}),  # type: ignore[arg-type]
                                              [self.t.taxonomy.node(j.label).evidence for j in confirmed],
                                              [leaf.evidence for leaf in self.t.taxonomy.leaves()])):
            # history found a cause, but some failure it does not explain: search the taxonomy for the rest
            path.append({"pipeline": 1, "node": "ROOT", "action": "continue",
                         "detail": "not explained: " + ", ".join(left[:5])})
            confirmed = []
        merged: Any = {**state, **update, "judgements": [j.model_dump(mode="json") for j in judgements]}
        if confirmed and not self._tied(merged) and not {j.label for j in confirmed} & set(self._likeliest(merged)):
            # on the hosts, but nothing ties it to this incident and the incident does not read like it: most likely
            # an old problem the hosts carry; search on (one it reads like ends the search, as follow_reading would)
            path.append({"pipeline": 1, "node": "ROOT", "action": "continue",
                         "detail": "confirmed, but nothing ties it to this incident: " + ", ".join(
                             j.label for j in confirmed)})
            confirmed = []
        update.update({"judgements": [j.model_dump(mode="json") for j in judgements], "path": path,
                       "memory": memory, "pipeline": 1 if confirmed else 0})
        return update

    def dfs_init(self, state: DiagnosisState) -> dict[str, Any]:
        root: Frame = {"label": "", "phase": "enter", "children": [], "next": 0, "mark": len(state.get("memory", []))}
        return {"stack": [root], "visited": [], "path": self._trace(state, 2, "", "start")}

    def dfs(self, state: DiagnosisState) -> dict[str, Any]:
        """One step of Algorithm 1 on the explicit stack."""
        stack: list[Frame] = [dict(f) for f in state["stack"]]  # type: ignore[misc]
        frame = stack[-1]
        label = frame["label"]
        memory = list(state.get("memory", []))
        update: dict[str, Any] = {}
        if frame["phase"] == "children":
            if frame["next"] < len(frame["children"]):
                child = frame["children"][frame["next"]]
                frame["next"] += 1
                visited = list(state.get("visited", []))
                if child in visited or any(f["label"] == child for f in stack):
                    # loop breaker: a node is entered at most once per pass of the walk
                    self.t.emit({"type": "loop", "node": child})
                    return {"stack": stack, "path": self._trace(state, 2, child, "loop",
                                                                "already visited in this pass: skipped")}
                stack.append({"label": child, "phase": "enter", "children": [], "next": 0, "mark": len(memory)})
                self.t.emit({"type": "hypothesis", "node": child, "depth": len(stack) - 1})
                return {"stack": stack, "visited": [*visited, child], "path": self._trace(state, 2, child, "enter")}
            stack.pop()
            return {"stack": stack, "memory": memory[:frame["mark"]]}  # ClearMemory on backtrack
        results: list[CheckResult] = []
        if label:
            results, changes = self._execute(state, label)
            update.update(changes)
            memory += [Observation(node=label, result=r).model_dump(mode="json") for r in results]
        merged = {**state, **update, "memory": memory}
        node = self.t.taxonomy.node(label)
        if label and node.is_leaf:
            # judged again even if pipeline 1 or an earlier round did: checks are cached, the text may be newer
            judgement = self._judge(merged, label, 2)  # type: ignore[arg-type]
            judgements = [j for j in load_judgements(state) if j.label != label] + [judgement]
            stack.pop()
            return {**update, "stack": stack, "memory": memory[:frame["mark"]],
                    "judgements": [j.model_dump(mode="json") for j in judgements],
                    "path": self._trace(state, 2, label, judgement.status, judgement.why)}
        untested = None
        if state.get("widened"):
            judged = {j["label"] for j in state.get("judgements", [])}
            untested = {leaf.label for leaf in self.t.taxonomy.leaves(label)} - judged
        ranked = planning.rank_children(self.t.reasoner, self.t.taxonomy, self._summary(state), label,
                                        load_memory(merged), state.get("priors", {}), untested)  # type: ignore[arg-type]
        kept = [c.label for c in ranked if c.keep]
        self.t.emit({"type": "rank", "node": label or "ROOT", "ranked": [c.model_dump() for c in ranked]})
        detail = "; ".join(f"{c.label.rsplit('.', 1)[-1]} {c.score:.2f}{'' if c.keep else ' (pruned)'}"
                           for c in ranked)
        path = self._trace(state, 2, label, "rank", detail)
        if not kept:
            stack.pop()
            path.append({"pipeline": 2, "node": label, "action": "early_stop", "detail": "no child is relevant"})
            return {**update, "stack": stack, "memory": memory[:frame["mark"]], "path": path}
        frame.update({"phase": "children", "children": kept, "next": 0})
        return {**update, "stack": stack, "memory": memory, "path": path}

    def widen(self, state: DiagnosisState) -> dict[str, Any]:
        """The focused walk confirmed nothing: walk again visiting every branch with an untested leaf (passive
        checks are read-only and cached, so this costs only the checks not run yet)."""
        self.t.emit({"type": "widen"})
        return {"widened": True, "path": self._trace(state, 2, "", "widen", "nothing confirmed: every branch")}

    def explore(self, state: DiagnosisState) -> dict[str, Any]:
        summary = self._summary(state)
        passages = self.t.kb_query(summary.query, 4) if self.t.kb_query else []
        hypotheses = self.t.reasoner.explore(summary, load_memory(state), passages, load_judgements(state))
        dumped = [h.model_dump(mode="json") for h in hypotheses]
        self.t.emit({"type": "exploration", "hypotheses": dumped})
        return {"exploration": dumped, "path": self._trace(state, 3, "", "explore", f"{len(dumped)} suggestions")}

    def feedback(self, state: DiagnosisState) -> dict[str, Any]:
        from langgraph.types import interrupt

        answer = interrupt({"kind": "feedback", "hypotheses": state.get("exploration", []),
                            "question": "No root cause was confirmed. What else do you see (new error lines, what "
                                        "changed, results of the steps above)? Leave empty to escalate."})
        text = str(answer or "").strip()
        rounds = state.get("feedback_rounds", 0) + 1
        if not text:
            return {"feedback_rounds": rounds}
        return {"feedback": [*state.get("feedback", []), text], "feedback_rounds": rounds, "widened": False,
                "path": self._trace(state, 3, "", "feedback", text[:200])}

    def follow_reading(self, state: DiagnosisState) -> dict[str, Any]:
        """What the walk confirmed does not explain this incident (old or unrelated problems the hosts carry): test
        the incident's likeliest causes the walk left untested before concluding."""
        update: dict[str, Any] = {"read_followed": True}
        judgements = load_judgements(state)
        path = self._trace(state, 2, "", "follow_reading", "what was confirmed does not explain the incident")
        for label in self._unread(state):
            if self._stop:
                break
            _, changes = self._execute({**state, **update}, label)  # type: ignore[misc]
            update.update(changes)
            judgement = self._judge({**state, **update}, label, 2)  # type: ignore[misc]
            judgements = [j for j in judgements if j.label != label] + [judgement]
            path.append({"pipeline": 2, "node": label, "action": judgement.status, "detail": judgement.why})
        return {**update, "path": path, "judgements": [j.model_dump(mode="json") for j in judgements]}

    def corroborate(self, state: DiagnosisState) -> dict[str, Any]:
        """Several confirmed leaves tie to the incident: run the active checks their passive evidence let us skip,
        and judge them again on everything, so which cause comes first rests on all the evidence, not on the
        visiting order. A confirmed leaf nothing ties to the incident is not this incident's cause whatever its
        strength, so minutes of load on the hosts would not change the answer: it is reported as found."""
        confirmed = self._tied(state)
        if len(confirmed) < 2:
            return {}
        update: dict[str, Any] = {}
        path = list(state.get("path", []))
        pipeline = state.get("pipeline") or 2
        ran = {r.check for r in load_results(state)}
        missing = {j.label: [c for c in execution.by_tier(self.t.runner, execution.checks_for(
            self.t.taxonomy, self.t.runner, j.label))[1] if c not in ran] for j in confirmed}
        if not any(missing.values()) or self._stop:
            return {}
        # one question for every cause: asked once, it is not asked again when the node resumes
        purpose = (", ".join(j.label for j in confirmed) + " are each confirmed and tied to the incident: the tests "
                   "decide which of them comes first in the answer")
        approvals, approvers = self._decide(state, "corroborate", [c for v in missing.values() for c in v], purpose)
        update["approvals"], update["approved_by"] = approvals, approvers
        for judgement in confirmed:
            if self._stop:
                break
            if missing[judgement.label]:
                _, changes = self._execute({**state, **update}, judgement.label, costly_too=True)  # type: ignore[misc]
                update.update(changes)
                path.append({"pipeline": pipeline, "node": judgement.label, "action": "corroborate",
                             "detail": ", ".join(missing[judgement.label])})
        if not update:
            return {}
        merged = {**state, **update}
        fresh = {j.label: reflection.validate(self.t.reasoner, self.t.taxonomy, self._summary(state), j.label,
                                              load_results(merged))  # type: ignore[arg-type]
                 for j in confirmed}
        judgements = [fresh.get(j.label, j) for j in load_judgements(state)]
        return {**update, "path": path, "judgements": [j.model_dump(mode="json") for j in judgements]}

    def _reading(self, state: DiagnosisState) -> dict[str, int]:
        summary = self._summary(state)
        similar = [PastIncident.model_validate(p) for p in state.get("similar", [])]
        return planning.reading(self.t.reader or self.t.reasoner, self.t.taxonomy, summary, similar)

    def _attribute(self, state: DiagnosisState) -> Attribution:
        """Which confirmed leaves are this incident's causes (agents/attribution.py)."""
        judgements = load_judgements(state)
        confirmed = [j for j in judgements if j.status == "confirmed"]
        if not confirmed:
            return Attribution()
        hosts = len(state.get("inventory") or {}) or len(Incident.model_validate(state["incident"]).hosts)
        return attribute(self.t.taxonomy, self._summary(state), confirmed, judgements, self._reading(state), hosts)

    def _tied(self, state: DiagnosisState) -> list[LeafJudgement]:
        """The causes the incident's own lines, devices or time tie (level confirmed). The walk's decisions rest on
        these alone, never on a claim's score: the checks a run makes do not depend on the claim model's weights."""
        found = self._attribute(state)
        return [j for j in found.primary if found.levels.get(j.label) == "confirmed"]

    def _likeliest(self, state: DiagnosisState) -> list[str]:
        """The incident's likeliest causes: its reading's first planning.FOLLOWED leaves."""
        reading = self._reading(state)
        return sorted(reading, key=reading.__getitem__)[:planning.FOLLOWED]

    def _unread(self, state: DiagnosisState) -> list[str]:
        """The incident's likeliest causes that nothing judged yet."""
        judged = {j["label"] for j in state.get("judgements", [])}
        return [label for label in self._likeliest(state) if label not in judged]

    def conclude(self, state: DiagnosisState) -> dict[str, Any]:
        found = self._attribute(state)
        ordered = found.primary
        stopped = state.get("stopped")
        suspected: list[conclusion.Suspected] = []
        if nothing_checkable(state):  # nothing was looked at: say so plainly, no reasoner needed
            text = cannot_check_explanation(state)
        elif stopped:  # no LLM call: the budget may be what ran out, and the stop must be said plainly
            text = stopped_explanation(stopped, state, ordered)
        else:
            text = conclusion.explain(self.t.reasoner, self._summary(state), found, load_memory(state))
            if not ordered:
                suspected = conclusion.suspected(self.t.taxonomy, load_judgements(state), load_results(state),
                                                 self._reading(state))
                text += conclusion.suspected_sentence(suspected)
        # the pipeline that first confirmed the primary cause (after the user's feedback, pipeline 2 counts as 3)
        pipeline = next((step["pipeline"] for step in state.get("path", []) if ordered
                         and step["node"] == ordered[0].label and step["action"] == "confirmed"), 0)
        if pipeline == 2 and state.get("feedback"):
            pipeline = 3
        result = conclusion.result(found, suspected, text, pipeline, stopped)
        causes = conclusion.roles(found)
        if causes and self.t.preserve is not None:  # before anyone reads the conclusion and acts on it
            bundle = self.t.preserve(state, causes)
            if bundle is not None:
                result["evidence_bundle"] = bundle
        self.t.emit({"type": "conclusion", **result})
        self.t.audit({**conclusion.audit_event(result), "spent": dict(state.get("spent", {}))})
        return {"conclusion": result, "pipeline": pipeline}

    # ---- routing ------------------------------------------------------------------------------------------
    @staticmethod
    def after_pretriage(state: DiagnosisState) -> str:
        return "conclude" if nothing_checkable(state) or state.get("stopped") else "historical"

    @staticmethod
    def after_historical(state: DiagnosisState) -> str:
        if state.get("stopped"):
            return "conclude"
        return "corroborate" if state.get("pipeline") == 1 else "dfs_init"

    def after_dfs(self, state: DiagnosisState) -> str:
        if state.get("stopped"):
            return "conclude"
        if state["stack"]:
            return "dfs"
        if any(j["status"] == "confirmed" for j in state.get("judgements", [])):
            if not state.get("read_followed") and not self._tied(state) and self._unread(state):
                return "follow_reading"
            return "corroborate"
        return "explore" if state.get("widened") else "widen"

    def after_explore(self, state: DiagnosisState) -> str:
        if state.get("stopped"):
            return "conclude"
        return "feedback" if state.get("feedback_rounds", 0) < self.t.max_feedback_rounds else "conclude"

    @staticmethod
    def after_feedback(state: DiagnosisState) -> str:
        fresh = len(state.get("feedback", [])) >= state.get("feedback_rounds", 0) > 0
        return "summarize_again" if fresh and not state.get("stopped") else "conclude"

    def build(self, checkpointer: Any = None):  # type: ignore[no-untyped-def]
        from langgraph.graph import END, START, StateGraph

        graph = StateGraph(DiagnosisState)
        for name in ("summarize", "inventory", "pretriage", "historical", "dfs_init", "dfs", "widen", "follow_reading",
                     "corroborate", "explore", "feedback", "conclude"):
            graph.add_node(name, self._guarded(name, getattr(self, name)))
        graph.add_node("summarize_again", self._guarded("summarize_again", self.summarize))
        graph.add_edge(START, "summarize")
        graph.add_edge("summarize", "inventory")
        graph.add_edge("inventory", "pretriage")
        graph.add_conditional_edges("pretriage", self.after_pretriage, ["historical", "conclude"])
        graph.add_conditional_edges("historical", self.after_historical, ["corroborate", "dfs_init", "conclude"])
        graph.add_edge("dfs_init", "dfs")
        graph.add_conditional_edges("dfs", self.after_dfs, ["dfs", "follow_reading", "corroborate", "widen", "explore",
                                                            "conclude"])
        graph.add_edge("follow_reading", "corroborate")
        graph.add_edge("corroborate", "conclude")
        graph.add_edge("widen", "dfs_init")
        graph.add_conditional_edges("explore", self.after_explore, ["feedback", "conclude"])
        graph.add_conditional_edges("feedback", self.after_feedback, ["summarize_again", "conclude"])
        graph.add_edge("summarize_again", "dfs_init")
        graph.add_edge("conclude", END)
        return graph.compile(checkpointer=checkpointer)
