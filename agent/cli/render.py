"""What the faces (`diagnose`, `chat`, `demo`) show of a diagnosis: live progress from the graph's events, the
final report panel, and the prompts that answer the graph's interrupts. No diagnosis logic lives here."""

from __future__ import annotations

import re
import select
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.padding import Padding
from rich.panel import Panel
from rich.status import Status
from rich.table import Table
from rich.text import Text

from agent import events as ev
from agent.events import Event

if TYPE_CHECKING:
    from agent.report import Report

VERDICT_STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "UNKNOWN": "magenta"}
VERDICT_ICON = {"PASS": "✓", "WARN": "!", "FAIL": "✗", "UNKNOWN": "?"}
STEP_MARK = {"confirmed": "✔", "rejected": "✘", "inconclusive": "?", "early_stop": "⊘"}
PIPELINES = {1: "pipeline 1: a similar past incident", 2: "pipeline 2: taxonomy search",
             3: "pipeline 3: exploration with your feedback"}
MAX_PATH_TOKENS = 40
MAX_STEP_CHARS = 240


def _short(label: str) -> str:
    return label.rsplit(".", 1)[-1] if label else "ROOT"


def _clip(text: str, limit: int = MAX_STEP_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ProgressView:
    """The graph's `emit` callback: one printed line per thing that happened, a spinner for what runs now.

    Use as a context manager around the run; `paused()` stops the spinner while a prompt waits for the user.
    A rendering problem is shown as a dim line and never breaks the diagnosis.
    """

    def __init__(self, console: Console):
        self.console = console
        self.depth = 1
        self.pipeline = 1
        self._checks_node = ""
        self._status: Status | None = None
        self._active = False
        self._began = time.perf_counter()
        # what is on the screen already: a walk again (widened, or after the user's answer) prints only what is
        # new; a node entered again is shown only when something new happens under it
        self._entered: set[str] = set()
        self._ranked: dict[str, tuple[str, ...]] = {}
        self._judged: dict[str, str] = {}
        self._skipped: set[tuple[str, ...]] = set()
        self._pending: list[tuple[int, str]] = []  # (depth, line) of nodes entered again, printed on demand
        self._fresh = ""  # the node whose line was just printed for the first time: its verdict belongs under it
        self._summaries = 0

    # ---- spinner ------------------------------------------------------------------------------------------
    def __enter__(self) -> ProgressView:
        self._status = self.console.status("summarizing the incident", spinner="dots")
        self._status.start()
        self._active = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.stop()
        self._active = False

    def set(self, text: str) -> None:
        if self._status is not None:
            self._status.update(escape(text))

    @contextmanager
    def paused(self) -> Iterator[None]:
        self._flush()  # a question about a node comes after the path to it
        running = self._active and self._status is not None
        if running:
            self._status.stop()  # type: ignore[union-attr]
            self._active = False
        try:
            yield
        finally:
            if running:
                self._status.start()  # type: ignore[union-attr]
                self._active = True

    def line(self, markup: str) -> None:
        self.console.print(markup, highlight=False, soft_wrap=True)  # one line each, the terminal wraps

    def new(self, markup: str) -> None:
        """A line that is news: the nodes entered again above it are shown first, so it reads in its place."""
        self._flush()
        self.line(markup)

    def _flush(self) -> None:
        for _, markup in self._pending:
            self.line(markup)
        self._pending = []

    # ---- events -------------------------------------------------------------------------------------------
    def __call__(self, event: Event) -> None:
        try:
            handler = getattr(self, f"_on_{event.type}", None)
            if handler is not None:
                handler(event)
        except Exception as exc:  # the display must never stop a diagnosis
            self.line(f"[dim](progress display: {escape(type(exc).__name__)}: {escape(str(exc))})[/]")

    def _indent(self, extra: int = 0) -> str:
        return "  " * (self.depth + extra)

    def _on_summary(self, e: ev.SummaryEvent) -> None:
        self._summaries += 1
        if self._summaries > 1:  # the user's answer became part of the incident: the walk starts again
            self.line("[bold]your answer[/] is part of the incident now: searching again "
                      "[dim](only what is new is shown)[/]")
            self.pipeline, self.depth = 2, 0
            self.set("choosing the next hypothesis")
            return
        self.line(f"[bold]incident[/]: {escape(_clip(e.title, 160))}")
        named = [f"{k} {', '.join(map(str, v))}" for k, v in e.entities.model_dump().items() if v and k != "versions"]
        if named:
            self.line(f"[dim]  seen in the text: {escape('; '.join(named))}[/]")
        self.set("searching similar past incidents (the first search loads the embedding model)")

    def _on_inventory(self, e: ev.InventoryEvent) -> None:
        for host in e.hosts:
            self.line(f"[{'yellow' if host.cannot_check else 'dim'}]{escape(_clip(host.line(), 480))}[/]")

    def _on_pretriage(self, e: ev.PretriageEvent) -> None:
        for tool in e.results:
            style = "red" if tool.status == "error" else "dim"
            text = tool.summary or tool.reason or tool.status
            self.line(f"[{style}]pre-triage {escape(tool.tool)}: {escape(_clip(text, 200))}[/]")

    def _on_history(self, e: ev.HistoryEvent) -> None:
        if e.similar:
            best: dict[str, float] = {}
            for p in e.similar:
                best[p.label] = max(best.get(p.label, 0.0), p.score)
            top = ", ".join(f"{escape(label)} {score:.2f}" for label, score in list(best.items())[:3])
            self.line(f"[bold]pipeline 1[/] similar past incidents: {top}")
        else:
            self.line("[bold]pipeline 1[/] no similar past incident")
        self.pipeline, self.depth = 1, 1
        self.set("testing what similar past incidents had")

    def _on_hypothesis(self, e: ev.HypothesisEvent) -> None:
        if self.pipeline != 2:
            self.pipeline = 2
            self.line("[bold]pipeline 2[/] taxonomy search (depth first)")
        self.depth = e.depth
        markup = f"{self._indent()}[cyan]▸ {escape(e.node)}[/]"
        self._pending = [(d, m) for d, m in self._pending if d < self.depth]
        if e.node in self._entered:
            self._pending.append((self.depth, markup))
            self._fresh = ""
        else:
            self._entered.add(e.node)
            self._fresh = e.node
            self.new(markup)
        self.set(f"pipeline 2: {e.node}")

    def _on_widen(self, e: ev.WidenEvent) -> None:
        self._pending = []
        self.line("[bold]pipeline 2[/] nothing confirmed yet: searching every branch with an untested leaf "
                  "[dim](only what is new is shown)[/]")
        self.set("pipeline 2: widened search")

    def _on_rank(self, e: ev.RankEvent) -> None:
        node = e.node
        if node == "ROOT":
            if self.pipeline != 2:
                self.pipeline = 2
                self.line("[bold]pipeline 2[/] taxonomy search (depth first)")
            self.depth = 0
        kept = [r for r in e.ranked if r.keep]
        pruned = len(e.ranked) - len(kept)
        order = tuple(r.label for r in kept)
        before = self._ranked.get(node)
        self._ranked[node] = order
        if before is None or [label for label in before if label in order] != [lb for lb in order if lb in before]:
            # first seen, or the order changed (the user's answer re-ranked it): the whole ranking is news
            if kept:
                shown = ", ".join(f"{escape(_short(r.label))} {r.score:.2f}" for r in kept)
                word = "next" if before is None else "re-ranked"
                self.new(f"{self._indent(1)}[dim]{word}: {shown}{f' ({pruned} pruned)' if pruned else ''}[/]")
            elif before is None:
                self.new(f"{self._indent(1)}[dim]⊘ no child of {escape(_short(node))} is relevant: back up[/]")
        elif added := [r for r in kept if r.label not in before]:  # the widened walk keeps more: only those
            shown = ", ".join(f"{escape(_short(r.label))} {r.score:.2f}" for r in added)
            self.new(f"{self._indent(1)}[dim]also: {shown}[/]")
        self.set("choosing the next hypothesis")

    def _on_checks(self, e: ev.ChecksEvent) -> None:
        if self.pipeline == 1 and e.node != self._checks_node:
            self.line(f"{self._indent()}[cyan]▸ {escape(e.node)}[/] [dim](from history)[/]")
        self._checks_node = e.node
        if e.checks:
            self.set(f"{_short(e.node)}: running {', '.join(e.checks)}")

    def _on_result(self, e: ev.ResultEvent) -> None:
        if e.cached:
            return
        style = VERDICT_STYLE.get(e.verdict, "")
        self.new(f"{self._indent(1)}[{style}]{VERDICT_ICON.get(e.verdict, '?')} {e.verdict:<7}[/] "
                 f"{escape(e.check)}@{escape(e.host)}: {escape(_clip(e.summary, 160))} "
                 f"[dim]{e.duration_s:.1f}s[/]")

    def _on_skipped(self, e: ev.SkippedEvent) -> None:
        key = (e.node, *e.checks)
        if key in self._skipped:
            return
        self._skipped.add(key)
        self.new(f"{self._indent(1)}[dim]skipped {escape(', '.join(e.checks))} (active): {escape(e.why)}[/]")

    def _on_judgement(self, e: ev.JudgementEvent) -> None:
        status, label = e.status, escape(e.label)
        if self._judged.get(e.label) == status and e.label != self._fresh:  # the same again
            self.set("choosing the next hypothesis")
            return
        self._judged[e.label] = status
        if status == "confirmed":
            self.new(f"{self._indent(1)}[bold green]✔ confirmed[/] [bold]{label}[/] "
                     f"({e.confidence:.2f}): {escape(_clip(e.why, 200))}")
        elif status == "inconclusive":
            self.new(f"{self._indent(1)}[yellow]? inconclusive[/] {label}: {escape(_clip(e.why, 160))}")
        else:
            self.new(f"{self._indent(1)}[red]✘ rejected[/] [dim]{label}[/]")
        self.set("choosing the next hypothesis")

    def _on_exploration(self, e: ev.ExplorationEvent) -> None:
        self._pending = []
        self.line(f"[bold]pipeline 3[/] no check confirmed a cause; {len(e.hypotheses)} suggestion(s) from the "
                  "knowledge base")
        self.set("concluding")

    def _on_conclusion(self, e: ev.ConclusionEvent) -> None:
        took = time.perf_counter() - self._began
        if e.resolved:
            labels = ", ".join(escape(c.label) for c in e.root_causes)
            self.line(f"[bold green]resolved[/] in {took:.1f} s: {labels}")
        else:
            self.line(f"[bold yellow]unresolved[/] after {took:.1f} s: escalate")


# ---- prompts ----------------------------------------------------------------------------------------------
PASTE_GAP_S = 0.05  # lines already waiting this soon after an Enter were pasted with it
APPROVE_ALL = {"a", "all", "y", "yes"}
APPROVE_NONE = {"", "n", "no", "none"}


def _input(console: Console, prompt: str) -> str | None:
    try:
        return console.input(prompt)
    except EOFError:
        return None


def _pasted() -> bool:
    """More input is already waiting on the terminal: the rest of a paste, not a line typed later."""
    try:
        return sys.stdin.isatty() and bool(select.select([sys.stdin], [], [], PASTE_GAP_S)[0])
    except (OSError, ValueError, AttributeError):  # no real stdin (a test runner's): no paste
        return False


def read_answer(console: Console, prompt: str, *, paste: bool = True) -> str:
    """One answer, ended by one Enter. On a terminal, lines pasted together with it (several error lines) belong
    to it: they are already waiting when its Enter is read. Without a terminal (a script) a `paste` answer reads
    up to an empty line or the end of input, as a script cannot paste."""
    console.print(prompt, highlight=False)
    first = _input(console, "[dim]>[/] ")
    if first is None:
        return ""
    lines = [first]
    interactive = sys.stdin.isatty() if hasattr(sys.stdin, "isatty") else False
    while paste and (_pasted() if interactive else first.strip()):
        line = _input(console, "")
        if line is None or (not interactive and not line.strip()):
            break
        lines.append(line)
    return "\n".join(lines).strip()


@cache
def _taxonomy() -> Any:
    from agent.taxonomy import load_taxonomy

    return load_taxonomy()


def check_purpose(node: str, check: str) -> str:
    """Why a check is asked at this node: the hypotheses it would confirm or rule out (the leaves below the node
    whose evidence rules read it), else the node itself."""
    try:
        taxonomy = _taxonomy()
        leaves = [leaf.label for leaf in taxonomy.leaves(node)
                  if any(rule.split(":", 1)[0] == check for rule in leaf.evidence)]
    except Exception:  # a view never breaks the diagnosis: the node's label says enough
        leaves = []
    if not leaves:
        return f"tests {node or 'the incident'}"
    shown = ", ".join(_short(label) for label in leaves[:4]) + (f" and {len(leaves) - 4} more" if len(leaves) > 4
                                                                  else "")
    return f"tests {shown}"


def parse_selection(answer: str, ids: list[str]) -> dict[str, bool] | None:
    """all / none / a subset by number or id (`1,3`, `1 3`, `dcgm_diag`); None when it is not one of those."""
    text = answer.strip().lower()
    if text in APPROVE_ALL:
        return dict.fromkeys(ids, True)
    if text in APPROVE_NONE:
        return dict.fromkeys(ids, False)
    chosen: set[str] = set()
    for token in filter(None, re.split(r"[\s,;]+", text)):
        if token.isdigit() and 1 <= int(token) <= len(ids):
            chosen.add(ids[int(token) - 1])
        elif token in ids:
            chosen.add(token)
        else:
            return None
    return {c: c in chosen for c in ids}


def ask_approval(console: Console, payload: dict[str, Any]) -> dict[str, bool]:
    """One question for all the active checks of this step, each with its cost and the hypothesis it tests."""
    node = str(payload.get("node", ""))
    checks = payload.get("checks", [])
    ids = [str(c["id"]) for c in checks]
    if not ids:
        return {}
    total = sum(float(c.get("expected_cost_s", 0)) for c in checks)
    purpose = str(payload.get("purpose") or "the read-only checks did not decide it")
    console.print(f"[yellow]{escape(node or 'this step')}[/]: {escape(purpose)}. "
                  f"{'A test that loads' if len(ids) == 1 else f'{len(ids)} tests that load'} the GPUs or the "
                  f"network (about {total:.0f} s in all):", highlight=False)
    for i, check in enumerate(checks, 1):
        console.print(f"  {i}. [bold]{escape(check['id'])}[/] about {float(check.get('expected_cost_s', 0)):.0f} s, "
                      f"{escape(check_purpose(node, check['id']))}: {escape(_clip(check.get('description', ''), 160))}",
                      highlight=False)
    if len(ids) == 1:
        question = "Run it? [bold]y[/]es / [bold]n[/]o [dim](Enter: no)[/] "
    else:
        question = "Run them? [bold]a[/]ll / [bold]n[/]one / some by number, e.g. [bold]1,3[/] [dim](Enter: none)[/] "
    for _ in range(3):
        answer = _input(console, question)
        if answer is None:
            break
        chosen = parse_selection(answer, ids)
        if chosen is not None:
            return chosen
        console.print(f"[dim]answer {'y or n' if len(ids) == 1 else 'a, n, or numbers from 1 to ' + str(len(ids))}[/]",
                      highlight=False)
    return dict.fromkeys(ids, False)


def print_suggestions(console: Console, hypotheses: list[dict[str, Any]], max_steps: int = 4) -> None:
    for i, h in enumerate(hypotheses, 1):
        console.print(f"[bold]{i}. {escape(h.get('title', ''))}[/]", highlight=False)
        if h.get("why"):
            console.print(f"   [dim]{escape(_clip(h['why']))}[/]", highlight=False)
        for step in h.get("steps", [])[:max_steps]:
            console.print(f"   - {escape(_clip(step))}", highlight=False)


def ask_feedback(console: Console, payload: dict[str, Any]) -> str:
    hypotheses = payload.get("hypotheses", [])
    if hypotheses:
        console.print("[bold]No check confirmed a cause. Things worth looking at:[/]")
        print_suggestions(console, hypotheses)
    return read_answer(console, f"[bold]{escape(payload.get('question', 'What else do you see?'))}[/]")


Answer = Callable[[dict[str, Any]], Any]


def make_answer(view: ProgressView | None, console: Console, *, interactive: bool, approve_all: bool = False,
                before: Callable[[], None] | None = None) -> Answer:
    """The `answer` callback for Diagnoser.run/resume: prompts when interactive, else the fixed policy
    (approvals: approve_all; feedback: none, which escalates)."""

    def answer(payload: dict[str, Any]) -> Any:
        with view.paused() if view is not None else _nothing():
            if before is not None:
                before()
            kind = payload.get("kind")
            if kind == "approval":
                if interactive:
                    return ask_approval(console, payload)
                return {c["id"]: approve_all for c in payload.get("checks", [])}
            if kind == "feedback":
                return ask_feedback(console, payload) if interactive else ""
            return None

    return answer


@contextmanager
def _nothing() -> Iterator[None]:
    yield


# ---- the report -------------------------------------------------------------------------------------------
def compact_path(report: Report) -> str:
    """`p1 UNCORRECTABLE_ECC ✔ · FALLEN_OFF_BUS ✘ | p2 GPU › MEMORY ⊘ …`: the walk, one token per node."""
    tokens: list[tuple[int, str, str]] = []  # (pipeline, node, text)
    for step in report.path:
        if step.action in ("rank", "start"):
            continue
        mark = STEP_MARK.get(step.action)
        if mark and tokens and tokens[-1][1] == step.node and tokens[-1][0] == step.pipeline:
            pipeline, node, text = tokens.pop()
            tokens.append((pipeline, node, f"{text} {mark}"))
        elif step.action in ("explore", "feedback"):
            tokens.append((step.pipeline, step.action, step.action))
        else:
            tokens.append((step.pipeline, step.node, f"{_short(step.node)}{' ' + mark if mark else ''}"))
    more = len(tokens) - MAX_PATH_TOKENS
    tokens = tokens[:MAX_PATH_TOKENS]
    out: list[str] = []
    last = None
    for pipeline, _, text in tokens:
        if pipeline != last:
            out.append(f"{'| ' if out else ''}p{pipeline} {text}")
            last = pipeline
        else:
            out.append(f"› {text}")
    return " ".join(out) + (f" … (+{more} more)" if more > 0 else "") if out else "(no step)"


def _grid(rows: list[tuple[str, str]], indent: int = 0) -> RenderableType:
    """Key/value lines with a hanging indent: long values wrap under themselves, not under the key."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    for key, value in rows:
        grid.add_row(key, Text.from_markup(value, emoji=False))
    return Padding(grid, (0, 0, 0, indent)) if indent else grid


CLI_APPROVE_HINT = "allow with --approve-active or --ask"


def report_panel(report: Report, *, resume_hint: str = "", approve_hint: str = CLI_APPROVE_HINT) -> Panel:
    """`approve_hint`: how the reader of this face allows the active checks left waiting for approval."""
    parts: list[RenderableType] = []
    if report.resolved:
        level = report.root_causes[0].level if report.root_causes else ""
        head = (f"[bold green]RESOLVED[/] by {PIPELINES.get(report.pipeline, f'pipeline {report.pipeline}')}"
                + (" — [bold]probable[/] cause: present on the hosts and fits the incident; nothing ties it to "
                   "the incident's own lines, devices or time" if level == "probable" else ""))
    else:
        head = "[bold yellow]UNRESOLVED[/]: no root cause confirmed; escalate to the provider"
    parts.append(Text.from_markup(head, emoji=False))
    if report.title:
        parts.append(_grid([("incident", escape(_clip(report.title, 200)))]))
    for i, cause in enumerate(report.root_causes, 1):
        severity = f", {escape(cause.severity)}" if cause.severity else ""
        level = f"{cause.level} " if cause.level else ""
        parts.append(Text.from_markup(f"\n[bold]{i}. {escape(cause.label)}[/]  {level}(confidence "
                                      f"{cause.confidence:.2f}){severity}", emoji=False))
        rows = [("reasons", escape(_clip(cause.link, 400)))] if cause.link else []
        rows += [("where", escape("; ".join(cause.where)))] if cause.where else []
        rows += [("evidence", escape(line)) for line in cause.evidence] or [("why", escape(cause.why))]
        rows += [("line", escape(_clip(line, 300))) for line in cause.lines[:3]]
        rows += [("action", escape(action)) for action in cause.actions]
        rows += [("drain", escape(command)) for command in cause.drain]
        if cause.runbook:
            rows.append(("fix", escape(_clip(cause.runbook, 400))))
        parts.append(_grid(rows, indent=3))
    if report.follows:
        parts.append(Text.from_markup("\n[bold]what followed from it[/]", emoji=False))
        for cause in report.follows:
            parts.append(Text(f" • {cause.label}: {_clip(cause.link, 200)}"))
    if report.suspected:
        parts.append(Text.from_markup("\n[bold]suspected (not checked: this view cannot see it)[/]", emoji=False))
        for s in report.suspected:
            parts.append(Text(f" • {s.label} (likely cause no. {s.rank} of the incident's text): {_clip(s.why, 200)}"))
            parts.append(_grid([("run", escape(_clip(c, 200))) for c in s.commands[:5]], indent=3))
    if report.also_found:
        parts.append(Text.from_markup("\n[bold]also found on the hosts, not the cause of this incident[/]",
                                      emoji=False))
        for cause in report.also_found:
            where = f" on {'; '.join(cause.where)}" if cause.where else ""
            parts.append(Text(f" • {cause.label}{where}: {_clip(cause.link, 200)}"))
    if not report.resolved:
        if report.explanation:
            parts.append(Text(report.explanation))
        if report.exploration:
            parts.append(Text.from_markup("\n[bold]worth looking at next[/]", emoji=False))
            for h in report.exploration[:4]:
                parts.append(Text.from_markup(f" • {escape(_clip(h.title, 160))}", emoji=False))
                if h.related_labels and h.why:  # an undecided leaf: why its checks could not decide it
                    parts.append(_grid([("why", escape(_clip(h.why, 240)))], indent=3))
                if h.steps:
                    parts.append(_grid([("-", escape(_clip(s, 160))) for s in h.steps[:3]], indent=3))
    waiting = sorted({r.check for r in report.results
                      if r.verdict.value == "UNKNOWN" and "approval" in f"{r.reason} {r.summary}"})
    causes = ", ".join(f"{n} {cause}" for cause, n in sorted(report.llm_fallback_causes.items()))
    fallbacks = (f", {report.llm_fallbacks} fallback(s)" + (f" ({causes})" if causes else "")
                 if report.llm_fallbacks else "")
    rows = [("hosts", escape("; ".join(e.line() for e in report.inventory))),
            *(("slurm", escape(job.line())) for job in report.slurm_jobs),
            ("path", escape(compact_path(report))),
            ("checks", f"{report.checks_run} run, {report.check_seconds:.1f} s of check time; "
                       f"wall {report.wall_s:.1f} s"),
            ("LLM", f"{escape(report.reasoner)}: {report.llm_calls} call(s), {report.tokens} tokens{fallbacks}")]
    if waiting:
        rows.append(("not run", f"[magenta]{escape(', '.join(waiting))}[/] (approval required: "
                                f"{escape(approve_hint)})"))
    rows.append(("run", escape(report.run_id)))
    if resume_hint:
        rows.append(("resume", escape(resume_hint)))
    parts += [Text(""), _grid(rows)]
    return Panel(Group(*parts), title="aidai diagnosis", border_style="green" if report.resolved else "yellow",
                 expand=True)


def resume_command(run_id: str, data_dir: str | None) -> str:
    return f"aidai diagnose --resume {run_id}" + (f" --data-dir {data_dir}" if data_dir else "")
