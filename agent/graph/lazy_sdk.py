"""Defer the LangGraph Platform SDK's package `__init__` (its HTTP and websocket clients) until something asks the
package itself for a name.

`langgraph.runtime` imports one type from `langgraph_sdk.auth.types`, and importing any submodule first runs
`langgraph_sdk/__init__.py`, which imports the whole remote client (httpx, websockets, streaming transports: ~170
modules, 0.1-0.15 s of CPU on a cold `aidai diagnose`). A graph run in-process never uses that client. Here the
package is registered as a module whose submodules import as usual, and whose own `__init__` runs, once, on the
first attribute asked of the package (PEP 562 `__getattr__`): `from langgraph_sdk import get_client` still works,
it just pays then.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

PACKAGE = "langgraph_sdk"


def defer_sdk_init(name: str = PACKAGE) -> bool:
    """Register `name` lazily; False (and nothing done) when it is imported already or cannot be found."""
    if name in sys.modules:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return False
    module = importlib.util.module_from_spec(spec)

    def __getattr__(attr: str) -> Any:
        del module.__dict__["__getattr__"]  # from here on the package is an ordinary module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        return getattr(module, attr)

    vars(module)["__getattr__"] = __getattr__  # PEP 562: a module's own __getattr__
    sys.modules[name] = module
    return True
