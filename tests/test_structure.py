"""The code's shape a newcomer relies on: no import circles in agent/, the graph only wires, and each of the five
agents owns the nodes of its step."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

from agent.graph.build import DiagnosisGraph

ROOT = Path(__file__).resolve().parent.parent
AGENTS = ("summarization", "planning", "execution", "reflection", "conclusion")


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def imported(tree: ast.Module, name: str, is_package: bool) -> set[str]:
    """Every module `name` imports, at module level or inside functions; an import under `if TYPE_CHECKING:` is
    for the type checker only and never runs."""
    typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for inner in ast.walk(node)}
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def import_graph() -> nx.DiGraph:
    files = {module_name(p): p for p in (ROOT / "agent").rglob("*.py")}
    graph = nx.DiGraph()
    for name, path in files.items():
        for target in imported(ast.parse(path.read_text()), name, path.name == "__init__.py"):
            while target and target not in files:  # `from pkg import name`: the module that defines it
                target = target.rpartition(".")[0]
            if target and target != name:
                graph.add_edge(name, target)
    return graph


def test_no_module_in_agent_imports_itself_through_others() -> None:
    graph = import_graph()
    assert graph.number_of_edges() > 300  # the walk found the imports
    assert list(nx.simple_cycles(graph)) == []


def test_the_circle_finder_finds_a_circle() -> None:
    tree = ast.parse("from agent.b import x\ndef f():\n    from .c import y\n"
                     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agent.d import z\n")
    assert imported(tree, "agent.a", False) == {"agent.b", "agent.b.x", "agent.c", "agent.c.y", "typing",
                                                "typing.TYPE_CHECKING"}


def logic_lines(path: Path) -> int:
    """Lines of code: no blank lines, comments or docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {line for node in ast.walk(tree) if isinstance(node, ast.Expr)
                  and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                  for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
    return sum(1 for number, line in enumerate(path.read_text().splitlines(), start=1)
               if line.strip() and not line.strip().startswith("#") and number not in docstrings)


def test_the_graph_only_wires_and_each_agent_owns_its_step() -> None:
    assert len((ROOT / "agent/graph/build.py").read_text().splitlines()) <= 200
    graph = DiagnosisGraph.without_hosts()
    owners = {name: type(step.__self__).__module__ for name, step in graph.nodes().items()}
    assert set(owners.values()) == {f"agent.agents.{agent}" for agent in AGENTS}
    assert owners["dfs"] == "agent.agents.planning" and owners["conclude"] == "agent.agents.conclusion"
    for agent in AGENTS:
        assert logic_lines(ROOT / "agent" / "agents" / f"{agent}.py") >= 60, agent


def test_the_docs_draw_the_graph_langgraph_builds() -> None:
    graph = DiagnosisGraph.without_hosts()
    drawn = graph.build().get_graph().draw_mermaid()
    page = (ROOT / "docs" / "agents.md").read_text()
    assert f"```mermaid\n{drawn}```" in page
