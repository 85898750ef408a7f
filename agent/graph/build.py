"""The online diagnosis as a LangGraph StateGraph (AidAI Fig. 4/6, Algorithm 1): the five agents' nodes, wired.

summarize → inventory → pretriage ─no host can be checked→ conclude
                          └→ historical (pipeline 1) ─confirmed→ corroborate → conclude
                                   ─confirmed, but none ties to the incident→ follow_reading → corroborate
                                   └→ dfs_init → dfs (pipeline 2, one step per super-step, explicit stack)
                                        ─confirmed→ corroborate → conclude
                                        ─confirmed, but none ties to the incident→ follow_reading (the incident's
                                                   likeliest causes still untested) → corroborate → conclude
                                        └→ widen (once: every branch with an untested leaf) → dfs_init
                                        └→ explore (pipeline 3) → feedback ─answer→ summarize again → dfs_init
                                                                           └→ conclude (escalate)

Which agent owns which node: summarization (summarize, pretriage, feedback), execution (inventory, and every check
any node runs), planning (historical, dfs_init, dfs, widen, explore), reflection (follow_reading, corroborate, and
every judgement), conclusion (conclude). `aidai graph --mermaid` draws this graph from LangGraph itself.

Every step is checkpointed; approvals of active checks and the user's feedback are LangGraph interrupts. Every node
runs inside the guard (agent/graph/guard.py) that counts what it spent against the run's limits; a limit reached,
or the loop breaker, routes straight to `conclude`, which escalates with the reason.

LangGraph (and the LangChain/LangSmith modules it pulls in, most of a second of CPU) is imported by `build` and
where a node interrupts, not with this module: a cold CLI starts the hosts' inventory first and imports it while
the hosts work (agent/diagnosis.py).
"""

from __future__ import annotations

from typing import Any

from agent.agents.conclusion import ConclusionAgent
from agent.agents.context import AgentTools
from agent.agents.execution import ExecutionAgent
from agent.agents.planning import PlanningAgent
from agent.agents.reading import IncidentReading
from agent.agents.reflection import ReflectionAgent
from agent.agents.summarization import SummarizationAgent
from agent.graph.guard import Guard, Node
from agent.graph.state import DiagnosisState
from agent.taxonomy import Taxonomy


class DiagnosisGraph:
    """The agents for one run's tools, and the graph that wires their nodes. `planning`: the planning agent's class
    (the TGD baseline gives one without pipeline 3)."""

    def __init__(self, tools: AgentTools, planning: type[PlanningAgent] = PlanningAgent):
        self.t = tools
        self.guard = Guard(tools)
        self.reading = IncidentReading(tools)
        self.summarization = SummarizationAgent(tools)
        self.execution = ExecutionAgent(tools, self.guard)
        self.conclusion = ConclusionAgent(tools, self.reading)
        self.reflection = ReflectionAgent(tools, self.guard, self.execution, self.reading, self.conclusion)
        self.planning = planning(tools, self.guard, self.execution, self.reflection, self.conclusion, self.reading)

    @classmethod
    def without_hosts(cls, taxonomy: Taxonomy | None = None) -> DiagnosisGraph:
        """The graph with no host, retrieval or model behind it: to draw it, or to read a saved run's state."""
        from agent.checks.runner import CheckRunner
        from agent.reasoning.offline import OfflineReasoner
        from agent.taxonomy import load_taxonomy

        taxonomy = taxonomy or load_taxonomy()
        return cls(AgentTools(taxonomy=taxonomy, reasoner=OfflineReasoner(taxonomy), runner=CheckRunner([])))

    def nodes(self) -> dict[str, Node]:
        """Each node of the graph and the agent's step it runs."""
        return {
            "summarize": self.summarization.summarize,
            "inventory": self.execution.inventory,
            "pretriage": self.summarization.pretriage,
            "historical": self.planning.historical,
            "dfs_init": self.planning.dfs_init,
            "dfs": self.planning.dfs,
            "widen": self.planning.widen,
            "follow_reading": self.reflection.follow_reading,
            "corroborate": self.reflection.corroborate,
            "explore": self.planning.explore,
            "feedback": self.summarization.feedback,
            "summarize_again": self.summarization.summarize,
            "conclude": self.conclusion.conclude,
        }

    # ---- routing ------------------------------------------------------------------------------------------
    @staticmethod
    def after_pretriage(state: DiagnosisState) -> str:
        return "conclude" if not state.checkable_hosts() or state.stopped else "historical"

    def after_historical(self, state: DiagnosisState) -> str:
        if state.stopped:
            return "conclude"
        if state.pipeline != 1:
            return "dfs_init"
        # a past incident's cause found on the hosts that nothing ties to this one may be an old problem: the
        # incident's likeliest causes are tested before it is named, as after the walk
        return "follow_reading" if self._follow(state) else "corroborate"

    def after_dfs(self, state: DiagnosisState) -> str:
        if state.stopped:
            return "conclude"
        if state.stack:
            return "dfs"
        if any(j.status == "confirmed" for j in state.judgements):
            return "follow_reading" if self._follow(state) else "corroborate"
        return "explore" if state.widened else "widen"

    def _follow(self, state: DiagnosisState) -> bool:
        """Nothing confirmed ties to the incident and some of its likeliest causes are untested."""
        return not state.read_followed and not self.conclusion.tied(state) and bool(self.reading.unread(state))

    def after_explore(self, state: DiagnosisState) -> str:
        if state.stopped:
            return "conclude"
        return "feedback" if state.feedback_rounds < self.t.max_feedback_rounds else "conclude"

    @staticmethod
    def after_feedback(state: DiagnosisState) -> str:
        fresh = len(state.feedback) >= state.feedback_rounds > 0
        return "summarize_again" if fresh and not state.stopped else "conclude"

    def build(self, checkpointer: Any = None) -> Any:
        """The compiled graph (a LangGraph CompiledStateGraph), checkpointed by `checkpointer`."""
        from langgraph.graph import END, START, StateGraph

        graph = StateGraph(DiagnosisState)
        for name, node in self.nodes().items():
            graph.add_node(name, self.guard.wrap(name, node))
        graph.add_edge(START, "summarize")
        graph.add_edge("summarize", "inventory")
        graph.add_edge("inventory", "pretriage")
        graph.add_conditional_edges("pretriage", self.after_pretriage, ["historical", "conclude"])
        graph.add_conditional_edges("historical", self.after_historical,
                                    ["corroborate", "follow_reading", "dfs_init", "conclude"])
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
