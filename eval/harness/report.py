"""The benchmark's Markdown tables and JSON files: `<tag>.md`, `<tag>.metrics.json` and `<tag>.rows.jsonl` in the
output directory, plus `metrics.json` there, which keeps every tag's metrics side by side."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from agent.paths import ROOT

UNDEFINED = "undefined"


def commit() -> str:
    """The short commit of the checkout, marked when the tree has uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head or 'unknown'}{' + uncommitted changes' if dirty else ''}"


def _f(value: Any, digits: int = 3) -> str:
    if value is None:
        return UNDEFINED
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def _false(m: dict[str, Any]) -> str:
    """False confirmations as 'rate (count)'; undefined when no row has a right leaf."""
    return f"{_f(m.get('false_confirmation_rate'))} ({m.get('false_confirmations', 0)})"


def _controls(m: dict[str, Any]) -> str:
    """Controls confirmed as 'share (k/n)'; a dash when the run had no controls."""
    if not m.get("controls"):
        return "—"
    return f"{_f(m['controls_confirmed'])} ({m['controls_confirmed_n']}/{m['controls']})"


def breakdown_tables(metrics: dict[str, dict[str, Any]]) -> list[str]:
    """Per view and per node count: one row per (value, method), the numbers of the accuracy table that matter
    there (the confounds of a realistic fleet hit some views and job sizes harder than others)."""
    out: list[str] = []
    for key, title, column in (("by_view", "Per view", "view"), ("by_nodes", "Per node count", "nodes")):
        rows = [[value, name, s["n"], s["errors"], _f(s["leaf_micro_f1"]), _false(s), _controls(s)]
                for name, m in metrics.items() for value, s in (m.get(key) or {}).items()]
        if rows:
            rows.sort(key=lambda r: (_natural(r[0]), list(metrics).index(r[1])))
            out += ["", f"## {title}", ""]
            out += _table([column, "method", "n", "errors", "leaf micro-F1", "false confirmations",
                           "controls confirmed"], rows)
    return out


def level_tables(metrics: dict[str, dict[str, Any]]) -> list[str]:
    """Precision per level of the first claimed cause, and the reliability of its confidence per decile."""
    leveled = {name: m for name, m in metrics.items() if m.get("levels")}
    if not leveled:
        return []
    out = ["", "## Claims by level", "",
           "confirmed: the incident's lines, devices or time tie the cause; probable: a state the hosts are in that "
           "fits the incident, nothing better found; suspected: nothing claimed, the likeliest cause could not be "
           "checked from this view (not a prediction).", ""]
    rows = []
    for name, m in leveled.items():
        lv = m["levels"]
        rows.append([name, *(f"{lv[k]['claims']} ({lv[k]['right']} right, {lv[k]['controls']} on controls)"
                             for k in ("confirmed", "probable")),
                     _f(lv["confirmed"]["precision"]), _f(lv["probable"]["precision"]),
                     f"{lv['suspected']['escalations']} ({lv['suspected']['right_first']} right first, "
                     f"{lv['suspected']['right_any']} among them)"])
    out += _table(["method", "confirmed claims", "probable claims", "confirmed precision", "probable precision",
                   "escalations with a suspected cause"], rows)
    out += ["", "## Reliability of the claims' confidence", "",
            "First claimed cause per incident, by level and confidence decile; a claim on a control is wrong.", ""]
    rows = [[name, c["level"], f"{c['decile'] / 10:.1f}-{(c['decile'] + 1) / 10:.1f}", _f(c["mean_confidence"], 2),
             c["claims"], c["right"], _f(c["right"] / c["claims"], 2)]
            for name, m in leveled.items() for c in m["reliability"]]
    out += _table(["method", "level", "confidence", "mean confidence", "claims", "right", "share right"], rows)
    return out


def _natural(value: str) -> tuple[int, float, str]:
    """Node counts by size (2 before 16), views by name."""
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def summary_line(name: str, m: dict[str, Any]) -> str:
    """The console's one line per method."""
    controls = f" · controls confirmed {_controls(m)}" if m.get("controls") else ""
    return (f"{name:<11} leaf micro-F1 {m['leaf']['micro_f1']} macro-F1 {m['leaf']['macro_f1']} · "
            f"MAIN micro-F1 {m['main']['micro_f1']} · false confirmations {_false(m)}{controls} · "
            f"errors {m['errors']}/{m['n']} · checks {m['checks_per_incident']} "
            f"({m['check_seconds_per_incident']} s, active {m['active_check_seconds_per_incident']} s) · "
            f"LLM calls {m['llm_calls_per_incident']} per incident")


def markdown(tag: str, metrics: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    methods = list(metrics)
    out = [f"# Diagnosis benchmark: {tag}", "",
           f"{meta['date']} · commit {meta['commit']} · `{meta['command']}`", "",
           f"Incidents: {meta['incidents']} ({meta['n']}) · history DB: {meta['history']} · reasoner: {meta['llm']}"
           f" · {meta['workers']} worker process(es) · run {meta['wall_s']} s", "",
           "Prediction = the top confirmed leaf; an escalated incident (or a failed run) has no prediction: a miss "
           "for recall, not a false positive. Precision is undefined when nothing is predicted. Check seconds are "
           "the manifest's expected cost of the checks run (per host), i.e. what a real run would spend; wall "
           "seconds are the simulation's, and 'excl. check waits' subtracts the time spent waiting for the simulated "
           "checks: the method's own time. A false confirmation is a wrong prediction backed by strong check "
           "evidence (share of the incidents that have a cause). Controls are incidents whose cause was removed from "
           "the simulated hosts: the right outcome is no prediction; 'controls confirmed' is the share that got one, "
           "and they are left out of every P/R/F1.", "", "## Accuracy", ""]
    rows = []
    for name in methods:
        m = metrics[name]
        rows.append([name, m["n"], m["errors"], _f(m["resolved"]), _f(m["leaf"]["micro_precision"]),
                     _f(m["leaf"]["micro_recall"]), _f(m["leaf"]["micro_f1"]), _f(m["leaf"]["macro_f1"]),
                     _f(m["sub"]["micro_f1"]), _f(m["sub"]["macro_f1"]), _f(m["main"]["micro_f1"]),
                     _f(m["main"]["macro_f1"]), _false(m), _controls(m)])
    out += _table(["method", "n", "errors", "resolved", "leaf P", "leaf R", "leaf micro-F1", "leaf macro-F1",
                   "sub micro-F1", "sub macro-F1", "main micro-F1", "main macro-F1", "false confirmations",
                   "controls confirmed"], rows)
    out += breakdown_tables(metrics)
    out += level_tables(metrics)
    out += ["", "## Efficiency per incident", ""]
    rows = [[name, _f(m["checks_per_incident"], 1), _f(m["active_checks_per_incident"], 1),
             _f(m["check_seconds_per_incident"], 1), _f(m["active_check_seconds_per_incident"], 1),
             _f(m["llm_calls_per_incident"], 2), _f(m["tokens_in_per_incident"], 0),
             _f(m["tokens_out_per_incident"], 0), _f(m["wall_s_median"], 2), _f(m["reason_s_median"], 2),
             _f(m["reason_s_p90"], 2)]
            for name, m in metrics.items()]
    out += _table(["method", "checks", "of them active", "check s (expected)", "of them active", "LLM calls",
                   "tokens in", "tokens out", "wall s median", "excl. check waits: median", "p90"], rows)
    near = {name: m for name, m in metrics.items() if m.get("nearest_history_median") is not None}
    if near:
        out += ["", "Closest past incident retrieved (cosine similarity; how near the history is to the incidents "
                "under test): " + "; ".join(f"{name} median {_f(m['nearest_history_median'], 2)}, max "
                                            f"{_f(m['nearest_history_max'], 2)}" for name, m in near.items()) + "."]
    piped = {name: m for name, m in metrics.items() if m.get("pipeline_share")}
    if piped:
        out += ["", "## Resolved by pipeline (AidAI Table 3)", "",
                "Share of all incidents resolved by pipeline 1, 1+2, 1+2+3 (with the right leaf in brackets). "
                "Pipeline 3 resolves only after user feedback, which a batch run has none of; its suggestions for "
                "escalated incidents are counted in the last column.", ""]
        rows = []
        for name, m in piped.items():
            share, right = m["pipeline_share"], m["pipeline_share_correct"]
            rows.append([name] + [f"{_f(share[k])} ({_f(right[k])})" for k in ("1", "1+2", "1+2+3")]
                        + [m["escalated"], m["escalated_explored_right_sub"]])
        out += _table(["method", "p1", "p1+2", "p1+2+3", "escalated",
                       "escalated, exploration names the right MAIN.SUB"], rows)
    out += ["", "## Per category (leaf level: F1, precision / recall)", ""]
    categories = sorted({c for m in metrics.values() for c in m["per_category"]})
    rows = []
    for cat in categories:
        n = next((m["per_category"][cat]["n"] for m in metrics.values() if cat in m["per_category"]), 0)
        cells = []
        for m in metrics.values():
            s = m["per_category"].get(cat)
            cells.append(f"{_f(s['leaf']['f1'])} ({_f(s['leaf']['precision'], 2)} / {_f(s['leaf']['recall'], 2)})"
                         if s else "—")
        rows.append([cat, n, *cells])
    out += _table(["category", "n", *methods], rows)
    out += ["", "## Misses", ""]
    for name, m in metrics.items():
        out += [f"### {name} ({len(m['misses'])})", ""]
        if not m["misses"]:
            out += ["none", ""]
            continue
        rows = []
        for x in m["misses"]:
            outcome = x["outcome"] + (f": {x['error']}" if x["error"] else "")
            rows.append([x["id"], x["label"], x["predicted"] or "—", outcome,
                         "—" if x["pipeline"] is None else x["pipeline"], "; ".join(x["path"][-6:])[:400]])
        out += _table(["id", "label", "predicted", "outcome", "pipeline", "path"], rows)
        out.append("")
    for name, m in metrics.items():
        unseen = m.get("unseen")
        if not unseen:
            continue
        out += [f"## Unseen labels ({name}; AidAI Table 4)", "",
                f"Removed from the taxonomy and the history: {', '.join(unseen['removed'])}. Accuracy after = the "
                "prediction lands under the nearest remaining ancestor (a sibling leaf).", "",
                f"Affected incidents: {unseen['affected']} · accuracy before: {_f(unseen['accuracy_before'])} · "
                f"after: {_f(unseen['accuracy_after'])} · right category after: "
                f"{_f(unseen['main_accuracy_after'])} · escalated: {_f(unseen['escalated'])}", ""]
        out += _table(["removed label", "incidents", "accuracy before", "accuracy after (sibling)",
                       "right category after", "escalated"],
                      [[label, s["affected"], _f(s["accuracy_before"]), _f(s["accuracy_after"]),
                        _f(s["main_accuracy_after"]), _f(s["escalated"])] for label, s in unseen["by_label"].items()])
        out.append("")
        out += _table(["id", "removed label", "before", "after", "what happened", "path"],
                      [[r["id"], r["label"], r["before"] or "—", r["predicted"] or "—", r["outcome"],
                        "; ".join(r["path"][-5:])[:300]] for r in unseen["rows"]])
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def write(out_dir: Path, tag: str, metrics: dict[str, dict[str, Any]], rows: list[dict[str, Any]],
          meta: dict[str, Any]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / f"{tag}.md"
    md.write_text(markdown(tag, metrics, meta), encoding="utf-8")
    per_tag = out_dir / f"{tag}.metrics.json"
    per_tag.write_text(json.dumps({"meta": meta, "methods": metrics}, indent=1), encoding="utf-8")
    rows_file = out_dir / f"{tag}.rows.jsonl"
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    combined = out_dir / "metrics.json"
    try:
        everything = json.loads(combined.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        everything = {}
    everything[tag] = {"meta": meta, "methods": {name: {k: v for k, v in m.items() if k != "misses"}
                                                  for name, m in metrics.items()}}
    combined.write_text(json.dumps(everything, indent=1, sort_keys=True), encoding="utf-8")
    return [md, per_tag, rows_file, combined]


def meta(command: str, incidents: str, n: int, history: str, llm: str, workers: int, wall_s: float) -> dict[str, Any]:
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit(), "command": command,
            "incidents": incidents, "n": n, "history": history, "llm": llm, "workers": workers, "wall_s": wall_s}
