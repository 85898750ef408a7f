"""`aidai graph`: the diagnosis graph as LangGraph builds it, and which agent owns each node."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

console = Console(emoji=False)


def graph(
    mermaid: Annotated[bool, typer.Option("--mermaid", help="Print the graph as a Mermaid flowchart (drawn by "
                                                            "LangGraph from the compiled graph).")] = False,
) -> None:
    """The diagnosis graph: each node, the agent that owns it and the step it runs; --mermaid draws it."""
    from agent.graph.build import DiagnosisGraph

    built = DiagnosisGraph.without_hosts()
    if mermaid:
        print(built.build().get_graph().draw_mermaid(), end="")
        return
    table = Table("node", "agent", "step", title="The diagnosis graph (aidai graph --mermaid draws it)")
    for name, step in built.nodes().items():
        owner = getattr(step, "__self__", None)
        doc = " ".join((step.__doc__ or "").split()).removeprefix("Node")
        first = doc.lstrip(",: ").split(". ")[0].rstrip(".")
        table.add_row(name, type(owner).__module__ if owner is not None else "-", first)
    console.print(table)
