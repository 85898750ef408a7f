"""`aidai collect`: record a GPU host once (what every passive check sees there), diagnose it anywhere with
`--host bundle:FILE`; or write the one-file collector a customer runs without aidai."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from agent.executors.hosts import SPEC_HELP, HostSpecError, SshOptions, executors_for

console = Console(emoji=False, stderr=True)


def collect(
    host: Annotated[list[str] | None, typer.Option("--host", help=SPEC_HELP + " (repeatable).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="The bundle (one host: FILE.tar.gz; several: a "
                                                           "directory of HOST.tar.gz).")] = None,
    script: Annotated[Path | None, typer.Option("--script", help="Only write the standalone collector here "
                                                                 "(python3 aidai_collect.py > host.tar.gz).")] = None,
    no_redact: Annotated[bool, typer.Option("--no-redact", help="Keep secrets in the bundle.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds for the whole collection on each host.")] = 120.0,
    ssh_key: Annotated[str | None, typer.Option(help="SSH private key for ssh:// hosts.")] = None,
    known_hosts: Annotated[str | None, typer.Option(help="known_hosts file for ssh:// hosts.")] = None,
) -> None:
    """Record what aidai's passive checks see on each host into a bundle (commands, outputs, files, sha256s)."""
    if script is not None:
        from agent.collect.package import build_script

        build_script(script)
        console.print(f"wrote {script}: run `python3 {script.name} > host.tar.gz` on the GPU host (python3 only), "
                      f"then `aidai diagnose --host bundle:host.tar.gz`")
        return
    try:
        executors = executors_for(host or ["local"], SshOptions(key_file=ssh_key, known_hosts=known_hosts))
    except HostSpecError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    from agent.collect.remote import collect_hosts

    try:
        done = collect_hosts(executors, redact=not no_redact, timeout_s=timeout)
    finally:
        for executor in executors:
            executor.close()
    if out is None:
        out = Path(f"{done[0].host}.tar.gz") if len(done) == 1 else Path("aidai-bundles")
    failed = 0
    for item in done:
        if item.error:
            failed += 1
            console.print(f"[red]{item.host}[/]: not collected: {item.error}")
            continue
        target = out if len(done) == 1 else out / f"{item.host}.tar.gz"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.data)
        console.print(f"{item.host}: {target} ({len(item.data) / 1024:.0f} KiB, {item.seconds:.1f} s); diagnose it "
                      f"with --host bundle:{target}")
    if failed:
        raise typer.Exit(1)
