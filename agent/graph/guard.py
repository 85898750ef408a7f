"""The run's limits and loop breaker, enforced around every node of the graph (agent/limits.py says what they are).

Every node runs inside `Guard.wrap`: skipped once the run is stopped (conclude excepted), what it spent (checks,
seconds, LLM tokens, steps) added to the state, and the limits checked after it. The check runner asks `admit`
before executing anything: within the limits a batch runs only the jobs that fit, and a (host, check) that already
ran is a loop. A limit reached sets the state's `stopped`, which every route obeys.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from agent import limits as L
from agent.agents.context import AgentTools
from agent.audit_records import StoppedRecord, check_record
from agent.events import StoppedEvent
from agent.graph.state import DiagnosisState, channels, incident_time, result_key
from agent.models import CheckResult


class Node(Protocol):
    """A graph node: the typed state in, the members it changes out (typed; the guard writes them as JSON)."""

    def __call__(self, state: DiagnosisState) -> dict[str, Any]: ...


class Guard:
    def __init__(self, tools: AgentTools):
        self.t = tools
        # what the node being run has spent so far, and a limit it hit; nodes run one at a time
        self.spent: L.Spent = {}
        self.stop: L.Stop | None = None
        self.label = ""  # the node whose checks run now (for the audit log)
        self._node_began = 0.0
        self._node_tokens = 0
        # the loop breaker's memory: (host, check) executed by this process, and those in the checkpoint (the
        # cache holds both, so executing one again is a loop; a pre-triage check lost with a killed process is not)
        self._ran_here: set[str] = set()
        self._checkpointed: set[str] = set()
        tools.runner.admit = self.admit
        tools.runner.listeners.append(self.ran)

    @property
    def stopped(self) -> bool:
        return self.stop is not None

    def _tokens(self) -> int:
        usage = getattr(self.t.reasoner, "usage", None)
        return int(getattr(usage, "tokens", 0) or 0)

    def wrap(self, name: str, node: Node) -> Node:
        def guarded(state: DiagnosisState) -> dict[str, Any]:
            if state.stopped and name != "conclude":
                return {}
            self.spent, self.stop, self.label = L.add(state.spent), None, name
            self._adopt_inventory(state)
            self.t.runner.judge_events_at(incident_time(state.incident))
            self._checkpointed = set(state.results)
            self._node_began, self._node_tokens = time.perf_counter(), self._tokens()
            update = node(state)
            spent = L.add(self.spent, wall_s=time.perf_counter() - self._node_began,
                          tokens=self._tokens() - self._node_tokens, steps=1)
            update = {**update, "spent": spent}
            if name != "conclude" and not state.stopped:
                stop = self.stop or self.t.limits.exceeded(spent)
                if stop is not None:
                    update["stopped"] = stop
                    self.t.emit(StoppedEvent(node=name, **stop))
                    self.t.audit(StoppedRecord(node=name, **stop, spent=dict(spent)))
            return channels(update)

        return guarded

    def _adopt_inventory(self, state: DiagnosisState) -> None:
        """A resumed run's hosts are what its checkpoint says they are: the inventory is not taken again."""
        runner = self.t.runner
        for host, saved in (state.inventory or {}).items():
            if host in runner.executors and host not in runner.expectations:
                runner.adopt(saved.inventory, saved.expectations)

    def halt(self, stop: L.Stop) -> None:
        if self.stop is None:
            self.stop = stop

    def admit(self, jobs: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """The runner asks before executing anything (the agents' checks and the pre-triage tools' alike)."""
        if self.stop:
            return {job: f"the investigation stopped ({self.stop['limit']})" for job in jobs}
        elapsed = time.perf_counter() - self._node_began
        if stop := self.t.limits.exceeded(L.add(self.spent, tokens=self._tokens() - self._node_tokens),
                                          extra_wall_s=elapsed):
            self.halt(stop)
            return {job: stop["message"] for job in jobs}
        refused: dict[tuple[str, str], str] = {}
        looping = {f"{h}|{c}" for h, c in jobs} & (self._ran_here | self._checkpointed)
        if looping:
            shown = ", ".join(sorted(k.replace("|", " on ", 1) for k in looping)[:3])
            self.halt(L.stop("loop", f"loop breaker: {shown} would run again; the result is already known"))
            refused.update({job: "loop breaker: it already ran" for job in jobs if f"{job[0]}|{job[1]}" in looping})
        left = self.t.limits.checks_left(self.spent)
        rest = [job for job in jobs if job not in refused]
        if left is not None and len(rest) > left:
            over = rest[left:]
            self.halt(L.stop("max_checks", f"check limit reached: {self.spent.get('checks', 0) + left} of at most "
                                           f"{self.t.limits.max_checks} check runs; not run: "
                                           f"{', '.join(sorted({c for _, c in over}))}"))
            refused.update({job: f"check limit reached ({self.t.limits.max_checks} check runs)" for job in over})
        return refused

    def ran(self, result: CheckResult) -> None:
        """A check executed: count it against the limits and write it to the audit log."""
        self.spent = L.add(self.spent, checks=1)
        self._ran_here.add(result_key(result))
        self.t.audit(check_record(result, self.label, self.t.runner.exit_codes.get((result.host, result.check))))
