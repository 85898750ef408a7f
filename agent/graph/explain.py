"""What a diagnosis says when it could not look (no host checkable) or was stopped by a limit: plain text built from
the checkpointed state, no reasoner needed."""

from __future__ import annotations

from typing import Any

from agent import inventory as inv
from agent import limits as L
from agent.graph.state import DiagnosisState, load_judgements, load_results
from agent.reasoning.base import LeafJudgement


def nothing_checkable(state: DiagnosisState) -> bool:
    """The inventory found no host whose checks can run (a run checkpointed before the inventory step has none)."""
    saved = state.get("inventory")
    return saved is not None and all(s["expectations"].get("cannot_check") for s in saved.values())


def cannot_check_explanation(state: DiagnosisState) -> str:
    """The answer when no host could be checked: which, why, and that nothing was confirmed or rejected."""
    lines = [inv.Expectations.model_validate(saved["expectations"]).line() + "."
             for saved in state.get("inventory", {}).values()]
    lines = [line[0].upper() + line[1:] for line in lines]
    lines.append("Nothing was confirmed or rejected: no verification ran. Run aidai on the GPU node, or name the node "
                 "with --host; escalate with this ticket if the node itself cannot be reached.")
    return " ".join(lines)


def stopped_explanation(stop: L.Stop | dict[str, Any], state: DiagnosisState, confirmed: list[LeafJudgement]) -> str:
    """The conclusion of a stopped run: which limit, and what was tried before it (for the escalation)."""
    results = load_results(state)
    judged = load_judgements(state)
    counts = {s: sum(j.status == s for j in judged) for s in ("confirmed", "rejected", "inconclusive")}
    last = next((step["node"] for step in reversed(state.get("path", [])) if step.get("node") not in ("", "ROOT")),
                "")
    parts = [f"Investigation stopped: {stop['message']}.",
             f"Tried so far: {state.get('spent', {}).get('checks', len(results))} check run(s) on "
             f"{len({r.host for r in results}) or 'the'} host(s); "
             f"{len(judged)} hypothesis(es) tested ({counts['confirmed']} confirmed, {counts['rejected']} rejected, "
             f"{counts['inconclusive']} inconclusive)" + (f"; last node {last}." if last else ".")]
    if confirmed:
        parts.append("Confirmed before the stop: " + ", ".join(j.label for j in confirmed) + ".")
    else:
        parts.append("No root cause was confirmed before the stop: escalate with this ticket, or run it again "
                     "with a higher limit.")
    return " ".join(parts)
