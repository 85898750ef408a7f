"""The `aidai` command: one Typer app, one sub-app per area. Faces stay thin.

Each area's module is imported only when its command runs (or when help lists them all): `aidai diagnose` does
not pay for importing the evaluation harness, the web server, KAIOPS or L4. The commands are built by Typer
itself, exactly as `add_typer` / `command` would at start-up. When `diagnose` or `chat` runs, Chroma's client
library starts loading on a background thread (agent.knowledge.preload) while the hosts are inventoried.

`main` is the program (the `aidai` console script, `python -m agent.cli.main`): once `diagnose` has finished, the
process ends without the interpreter's teardown (see `main`). `app` alone, as tests call it, never does that.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

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
    "doctor": ("doctor_cmd", "doctor", "command"),
    "collect": ("collect_cmd", "collect", "command"),
    "graph": ("graph_cmd", "graph", "command"),
}
PRELOAD = {"diagnose", "chat"}  # commands whose pipeline 1 queries the knowledge store
FAST_EXIT = {"diagnose"}  # commands after which `main` ends the process without the interpreter's teardown
_finished: list[str] = []  # the FAST_EXIT commands whose callback has returned (or exited) in this process


def _preloading(callback: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        from agent.knowledge import preload

        preload.start()
        return callback(*args, **kwargs)

    return run


def _finishing(name: str, callback: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            result = callback(*args, **kwargs)
        except typer.Exit:
            _finished.append(name)
            raise
        _finished.append(name)
        return result

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
    if name in FAST_EXIT and command.callback is not None:
        command.callback = _finishing(name, command.callback)
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


def _print_version(value: bool) -> None:
    if value:
        from agent.installation import version

        print(f"aidai {version()}")
        raise typer.Exit()


@app.callback()
def _root(_version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                                 help="Print aidai's version and exit.")] = False) -> None:
    """aidai: diagnosis assistant for AI workload incidents on GPU machines."""


def main() -> None:
    """Run `app` as the program. When a FAST_EXIT command finished (returned or exited with a code), the process
    ends there: the exit handlers run and the standard streams are flushed, as at any exit, but the interpreter
    does not tear down the ~1,800 modules a diagnosis imported and free what they hold (0.3-0.5 s of CPU on a cold
    `aidai diagnose`, all of it for a process that is gone). Anything else (an error's traceback, another command,
    a thread still working) exits as usual."""
    try:
        app()
    except ModuleNotFoundError as exc:
        from agent.installation import missing_extra

        hint = missing_extra(exc)
        if hint is None:
            raise
        print(f"error: {hint}", file=sys.stderr)
        sys.exit(2)
    except SystemExit as done:
        code = 0 if done.code is None else done.code
        if not _finished or not isinstance(code, int) or _working_threads():
            raise
        _leave(code)


def _working_threads() -> bool:
    main_thread = threading.main_thread()
    return any(t.is_alive() and not t.daemon and t is not main_thread for t in threading.enumerate())


def _leave(code: int) -> NoReturn:
    atexit._run_exitfuncs()  # what a normal exit runs: logging's flush, libraries' own handlers
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more can reach it anyway
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
