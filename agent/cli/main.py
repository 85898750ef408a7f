"""The `aidai` command: one Typer app, one sub-app per area. Faces stay thin."""

from __future__ import annotations

import typer

from agent.cli import (
    audit_cmd,
    chat_cmd,
    checks_cmd,
    demo_cmd,
    diagnose_cmd,
    eval_cmd,
    history_cmd,
    kaiops_cmd,
    kb_cmd,
    l4_cmd,
    preflight_cmd,
    reveal_cmd,
    serve_cmd,
    sim_cmd,
    taxonomy_cmd,
)

app = typer.Typer(help="aidai: diagnosis assistant for AI workload incidents on GPU machines.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.add_typer(checks_cmd.app, name="checks")
app.add_typer(kb_cmd.app, name="kb")
app.add_typer(sim_cmd.app, name="sim")
app.add_typer(taxonomy_cmd.app, name="taxonomy")
app.command("diagnose")(diagnose_cmd.diagnose)
app.command("chat")(chat_cmd.chat)
app.command("demo")(demo_cmd.demo)
app.command("eval")(eval_cmd.eval_command)
app.add_typer(l4_cmd.app, name="l4")
app.add_typer(reveal_cmd.app, name="reveal")
app.command("preflight")(preflight_cmd.preflight)
app.add_typer(kaiops_cmd.app, name="kaiops")
app.add_typer(history_cmd.app, name="history")
app.command("serve")(serve_cmd.serve)
app.add_typer(audit_cmd.app, name="audit")

if __name__ == "__main__":
    app()
