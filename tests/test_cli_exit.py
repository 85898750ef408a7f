"""`aidai` as a program (agent.cli.main.main): after `diagnose` finished, the process ends without the interpreter's
teardown, yet with its exit code, its output flushed and the exit handlers run; any other ending exits as usual.
Each case runs a real Python process; the command is a stand-in registered under the name `diagnose`."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from agent.paths import ROOT

PROGRAM = textwrap.dedent('''
    import atexit, sys, threading, types
    import typer
    from agent.cli import main as cli

    def diagnose(code: int = 0, fail: bool = False, worker: bool = False) -> None:
        print("report", end="")          # no newline: stays in the buffer until something flushes it
        sys.stderr.write("progress")
        if worker:                       # a thread still working: the process must wait for it as usual
            threading.Thread(target=lambda: (__import__("time").sleep(0.5), print(" worker done", end=""))).start()
        if fail:
            raise RuntimeError("boom")
        raise typer.Exit(code)

    class Noisy:
        def __del__(self):               # teardown work: runs only when the interpreter tears down
            sys.stdout.write(" teardown")
    keep = Noisy()

    atexit.register(lambda: sys.stdout.write(" atexit"))
    stand_in = types.ModuleType("agent.cli.stand_in")
    stand_in.diagnose = diagnose
    sys.modules[stand_in.__name__] = stand_in
    cli.COMMANDS = {"diagnose": ("stand_in", "diagnose", "command")}
    cli.PRELOAD = set()  # no knowledge libraries to load for the stand-in
    cli.main()
''')


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROGRAM, "diagnose", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


def test_a_finished_diagnosis_exits_at_once_with_its_code_and_output() -> None:
    for code in ("0", "1", "2"):
        done = run("--code", code)
        assert done.returncode == int(code)
        assert done.stdout == "report atexit"  # flushed, exit handlers run, no teardown
        assert done.stderr == "progress"


def test_an_error_or_a_working_thread_exits_as_usual() -> None:
    failed = run("--fail")
    assert failed.returncode == 1 and "RuntimeError: boom" in failed.stderr
    assert failed.stdout.startswith("report atexit")
    waited = run("--worker")
    assert waited.returncode == 0 and "worker done" in waited.stdout and waited.stdout.endswith("teardown")
