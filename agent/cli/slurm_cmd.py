"""`aidai drain NODE --reason TEXT` and `aidai resume NODE`: a Slurm node out of (or back into) service, only with
the operator's approval (typing the node's name at the prompt, or --yes), behind the circuit breaker, recorded
in the audit log (agent/slurm/drain.py).

Exit codes: 0 done (or nothing to do), 1 refused (circuit breaker, someone else's drain, not approved), 2 bad
input or Slurm unreachable (one red line, no traceback).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from agent.cli.options import DataDirOpt
from agent.slurm.drain import DEFAULT_MAX_DRAINED_SHARE

if TYPE_CHECKING:
    from agent.slurm.drain import Approve, Outcome

EXIT_DONE, EXIT_REFUSED, EXIT_BAD_INPUT = 0, 1, 2

NodeArg = Annotated[str, typer.Argument(metavar="NODE", help="The Slurm node (one name, as `sinfo -N` lists it).")]
YesOpt = Annotated[bool, typer.Option("--yes", help="Approve without the prompt (you are the operator of record).")]
RunOpt = Annotated[str | None, typer.Option("--run", metavar="RUN_ID",
                                            help="Record it in this diagnosis run's audit log (default: the "
                                                 "fleet-actions log, `aidai audit show fleet-actions`).")]


def _approver(yes: bool, console: Console) -> Approve:
    """--yes, else the operator types the node's name at the prompt (stdin); anything else cancels."""

    def approve(node: str, question: str) -> tuple[bool, str]:
        if yes:
            return True, "--yes"
        console.print(escape(question), highlight=False, soft_wrap=True)
        try:
            typed = typer.prompt(f"Type {node} to confirm (anything else cancels)", default="", show_default=False,
                                 err=True)
        except (typer.Abort, EOFError):
            return False, "no answer at the prompt (pass --yes to approve without one)"
        if typed.strip() == node:
            return True, "typed the node name"
        return False, f"the operator typed {typed.strip()!r}, not {node!r}"

    return approve


def _act(run: str | None, data_dir: Path | None, action: str, call: Callable[..., Outcome]) -> None:
    """Open the audit log, run the drain/resume, print its outcome and exit with its code."""
    from agent.audit import AuditError, local_user
    from agent.paths import default_data_dir
    from agent.slurm.drain import open_log
    from agent.slurm.scontrol import SlurmError

    err = Console(stderr=True, emoji=False)
    try:
        audit = open_log((data_dir or default_data_dir()) / "runs", run)
        outcome = call(audit=audit, operator=local_user())
    except (SlurmError, AuditError) as exc:
        err.print(f"[red]error: {escape(str(exc))}[/]", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    colour = "green" if outcome.changed else "yellow" if outcome.refused else "default"
    Console(emoji=False).print(f"[{colour}]{escape(outcome.message)}[/]", highlight=False, soft_wrap=True)
    if outcome.changed or outcome.refused:
        err.print(f"[dim]{action} recorded in {escape(str(audit.path))}[/]", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_REFUSED if outcome.refused else EXIT_DONE)


def drain(
    node: NodeArg,
    reason: Annotated[str, typer.Option("--reason", metavar="TEXT", help="Why (Slurm shows it as "
                                        "'aidai: TEXT'; e.g. 'Xid 79 on GPU 2').")],
    yes: YesOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Drain even when the circuit breaker refuses (or replace "
                                        "the reason of a drained node); still needs your approval; audited.")
                     ] = False,
    max_drained_share: Annotated[float, typer.Option(
        "--max-drained-share", metavar="SHARE", envvar="AIDAI_SLURM_MAX_DRAINED_SHARE",
        help="Circuit breaker: refuse a drain that puts more than this share of a partition out of service "
             "(one node may always go).")] = DEFAULT_MAX_DRAINED_SHARE,
    run: RunOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Drain a Slurm node (no new jobs start on it; running jobs go on), with your approval, behind the circuit
    breaker, recorded in the audit log. Exit 0 drained, 1 refused, 2 bad input or Slurm error."""
    from agent.slurm.drain import drain as drain_node

    approve = _approver(yes, Console(stderr=True, emoji=False))
    _act(run, data_dir, "the drain", lambda **kw: drain_node(node, reason, approve=approve, share=max_drained_share,
                                                             force=force, **kw))


def resume(
    node: NodeArg,
    yes: YesOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Resume a node drained for another reason than aidai's "
                                        "(still needs your approval; audited).")] = False,
    run: RunOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Return a drained Slurm node to service, with your approval; says whether aidai drained it (and why), and
    refuses a node drained for another reason unless --force. Exit 0 resumed, 1 refused, 2 bad input."""
    from agent.slurm.drain import resume as resume_node

    approve = _approver(yes, Console(stderr=True, emoji=False))
    _act(run, data_dir, "the resume", lambda **kw: resume_node(node, approve=approve, force=force, **kw))
