"""The `aidai` command: one Typer app, one sub-app per area. Faces stay thin.

Each area's module is imported only when its command runs (or when help lists them all): `aidai diagnose` does
not pay for importing the evaluation harness, the web server, KAIOPS or L4. The commands are built by Typer
itself, exactly as `add_typer` / `command` would at start-up. When `diagnose` or `chat` runs, the knowledge
libraries start loading on a background thread (agent.knowledge.preload) while the hosts are inventoried.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperGroup

# name -> (module under agent.cli, attribute, kind): "group" for a sub-app (typer.Typer), "command" for a function;
# in the order `aidai --help` lists them
COMMANDS: dict[str, tuple[str, str, str]] = {
    "diagnose": ("diagnose_cmd", "diagnose", "command"),
    "chat": ("chat_cmd", "chat", "command"),
    "demo": ("demo_cmd", "demo", "command"),
    "eval": ("eval_cmd", "eval_command", "command"),
    "preflight": ("preflight_cmd", "preflight", "command"),
    "prometheus": ("prometheus_cmd", "prometheus", "command"),
    "serve": ("serve_cmd", "serve", "command"),
    "drain": ("slurm_cmd", "drain", "command"),
    "resume": ("slurm_cmd", "resume", "command"),
    "mcp": ("mcp_cmd", "mcp", "command"),
    "verify": ("verify_cmd", "verify", "command"),
    "checks": ("checks_cmd", "app", "group"),
    "kb": ("kb_cmd", "app", "group"),
    "sim": ("sim_cmd", "app", "group"),
    "taxonomy": ("taxonomy_cmd", "app", "group"),
    "l4": ("l4_cmd", "app", "group"),
    "reveal": ("reveal_cmd", "app", "group"),
    "kaiops": ("kaiops_cmd", "app", "group"),
    "history": ("history_cmd", "app", "group"),
    "audit": ("audit_cmd", "app", "group"),
    "llm": ("llm_cmd", "app", "group"),
}
PRELOAD = {"diagnose", "chat"}  # commands whose pipeline 1 queries the knowledge store


def _preloading(callback: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        from agent.knowledge import preload

        preload.start()
        return callback(*args, **kwargs)

    return run


def build_command(name: str) -> Any:
    """The click command for `name`, built by Typer from its module (imported now)."""
    module_name, attr, kind = COMMANDS[name]
    target = getattr(importlib.import_module(f"agent.cli.{module_name}"), attr)
    holder = typer.Typer()
    if kind == "group":
        holder.add_typer(target, name=name)
    else:
        holder.command(name)(target)
    command = typer.main.get_group(holder).commands[name]
    if name in PRELOAD and command.callback is not None:
        command.callback = _preloading(command.callback)
    return command


class LazyGroup(TyperGroup):
    """A Typer group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(dict.fromkeys([*COMMANDS, *self.commands]))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.commands[cmd_name] = build_command(cmd_name)
        return self.commands.get(cmd_name)


app = typer.Typer(cls=LazyGroup, help="aidai: diagnosis assistant for AI workload incidents on GPU machines.",
                  no_args_is_help=True, pretty_exceptions_enable=False)


@app.callback()
def _root() -> None:
    """aidai: diagnosis assistant for AI workload incidents on GPU machines."""


if __name__ == "__main__":
    app()
