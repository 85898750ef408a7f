"""The LangGraph Platform SDK's package `__init__` is deferred (agent/graph/lazy_sdk.py): building and running our
graph never imports its remote client, and a later `from langgraph_sdk import ...` still gets the real names.
Each case runs in a fresh interpreter (the deferral only acts before the package is first imported)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from agent.paths import ROOT


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_graph_runs_without_the_remote_client_and_the_package_still_answers() -> None:
    out = run('''
        import sys
        from agent.graph.lazy_sdk import defer_sdk_init
        assert defer_sdk_init() is True
        from langgraph.graph import END, START, StateGraph
        from typing import TypedDict
        class S(TypedDict):
            n: int
        g = StateGraph(S)
        g.add_node("inc", lambda s: {"n": s["n"] + 1})
        g.add_edge(START, "inc")
        g.add_edge("inc", END)
        assert g.compile().invoke({"n": 1}) == {"n": 2}
        print("client before:", "langgraph_sdk.client" in sys.modules)
        from langgraph_sdk import get_client, __version__
        print("client after:", "langgraph_sdk.client" in sys.modules, callable(get_client), bool(__version__))
    ''')
    assert out.splitlines() == ["client before: False", "client after: True True True"]


def test_nothing_is_deferred_once_the_package_is_imported() -> None:
    assert run('''
        import langgraph_sdk
        from agent.graph.lazy_sdk import defer_sdk_init
        print(defer_sdk_init(), defer_sdk_init("no_such_package_here"))
    ''') == "False False"
