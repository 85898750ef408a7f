"""`aidai llm probe --base-url URL --model NAME`: which structured-output forms an OpenAI-compatible endpoint
takes, the latency and tokens of one ranking question in each, and whether a diagnosis would run on it."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.cli.options import EXIT_BAD_INPUT
from agent.reasoning.factory import ReasonerConfigError, check_base_url

app = typer.Typer(help="OpenAI-compatible endpoints for the openai reasoner.", no_args_is_help=True)
EXIT_RUNS, EXIT_WOULD_NOT_RUN = 0, 1
STYLE = {"ok": "green", "invalid": "yellow", "refused": "red", "ignored": "red", "error": "magenta",
         "not tried": "dim"}


@app.callback()
def llm() -> None:
    """OpenAI-compatible endpoints for the openai reasoner (vLLM, SGLang, Ollama, llama.cpp, TGI, LM Studio ...)."""


@app.command("probe")
def probe_cmd(
    base_url: Annotated[str, typer.Option("--base-url", help="The endpoint, e.g. http://127.0.0.1:8000/v1.")],
    model: Annotated[str, typer.Option("--model", help="The model name the endpoint serves.")],
    api_key: Annotated[str | None, typer.Option(
        "--api-key", help="Else AIDAI_LLM_API_KEY or OPENAI_API_KEY; local servers need none.")] = None,
    form: Annotated[list[str] | None, typer.Option(
        "--form", help="Probe only these forms (repeatable): json_schema, tools, json_object+schema, json_object, "
                       "text.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds per request.")] = 60.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Try each structured-output form with one ranking question; exit 0 when a diagnosis would run on the model,
    1 when it would not, 2 on bad options."""
    from agent.reasoning.probe import probe
    from agent.reasoning.structured import FORMS

    err = Console(stderr=True, emoji=False)
    try:
        check_base_url(base_url)
    except ReasonerConfigError as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    unknown = sorted(set(form or []) - set(FORMS))
    if unknown or not model.strip() or timeout <= 0:
        why = (f"unknown form(s) {', '.join(unknown)}: choose from {', '.join(FORMS)}" if unknown else
               "--model must name the served model" if not model.strip() else "--timeout must be positive")
        err.print(f"[red]{escape(why)}[/]")
        raise typer.Exit(EXIT_BAD_INPUT)
    chosen = tuple(f for f in FORMS if not form or f in form)
    result = probe(base_url, model.strip(), api_key=api_key, timeout_s=timeout, forms=chosen)
    if as_json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        table = Table(title=f"{escape(model)} at {escape(base_url)}: one ranking question per form")
        for name, justify in (("form", "left"), ("result", "left"), ("seconds", "right"), ("calls", "right"),
                              ("prompt tokens", "right"), ("completion tokens", "right"), ("detail", "left")):
            table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
        for row in result.forms:
            style = STYLE.get(row.status, "")
            table.add_row(row.form, f"[{style}]{row.status}[/]", f"{row.seconds:.2f}", str(row.calls),
                          str(row.prompt_tokens), str(row.completion_tokens), escape(row.detail[:200]))
        console = Console(emoji=False)
        console.print(table)
        console.print(("[green]" if result.runs else "[red]") + escape(result.verdict) + "[/]")
    raise typer.Exit(EXIT_RUNS if result.runs else EXIT_WOULD_NOT_RUN)
