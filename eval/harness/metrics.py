"""Scores of one method's rows (AidAI §6.1): P/R/F1 at three levels, per category, pipeline shares, efficiency.

Prediction = the top confirmed leaf. An escalated (unresolved) incident, or one whose run failed, has no
prediction: a miss for recall and never a false positive. Precision is undefined (None, "undefined" in the
tables) when nothing was predicted; F1 = 2TP / (2TP + FP + FN), which is 0 in that case, not undefined.

Micro: counts summed over classes (every incident weighs the same). Macro: the mean over classes of the
per-class score, classes being every label that is a gold label or a prediction (sklearn's convention: a class
that is only ever predicted wrongly counts, with F1 0). Per-class precision is undefined for a class never
predicted and recall for a class never gold: those are left out of the macro mean of that score.

Controls (`control` rows: the record's cause faults were removed) have no right leaf: the right outcome is no
prediction. P/R/F1, resolved, per category and pipelines are computed over the other rows; controls are scored
by `controls_confirmed` (the share with any prediction). A false confirmation is a wrong prediction backed by
strong check evidence (`evidence` == "strong"): the diagnosis claims proof for the wrong cause. Efficiency means
are over every row that did not fail, controls included (their checks cost the same).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from eval.harness.problems import LEVELS, at_level

Row = dict[str, Any]
EFFICIENCY = {  # metrics key -> row field (per incident, means over rows that did not fail)
    "checks_per_incident": "checks_run",
    "active_checks_per_incident": "active_checks",
    "check_seconds_per_incident": "check_s",
    "active_check_seconds_per_incident": "active_check_s",
    "llm_calls_per_incident": "llm_calls",
    "tokens_in_per_incident": "tokens_in",
    "tokens_out_per_incident": "tokens_out",
    "llm_fallbacks_per_incident": "llm_fallbacks",
    "wall_s_per_incident": "wall_s",
}


def _ratio(num: float, den: float) -> float | None:
    return round(num / den, 4) if den else None


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(statistics.fmean(kept), 4) if kept else None


def _quantile(values: Iterable[float | None], q: float) -> float | None:
    kept = sorted(v for v in values if v is not None)
    if not kept:
        return None
    return round(kept[0] if len(kept) == 1 else statistics.quantiles(kept, n=100, method="inclusive")[
        round(q * 100) - 1], 3)


def prf(tp: int, fp: int, fn: int) -> dict[str, float | None]:
    return {"precision": _ratio(tp, tp + fp), "recall": _ratio(tp, tp + fn), "f1": _ratio(2 * tp, 2 * tp + fp + fn)}


def level_metrics(gold: list[str], predicted: list[str | None]) -> dict[str, Any]:
    """Micro and macro P/R/F1 of predictions (None = no prediction) against gold labels, already at one level."""
    classes = sorted(set(gold) | {p for p in predicted if p is not None})
    counts = {c: [0, 0, 0] for c in classes}  # tp, fp, fn
    for g, p in zip(gold, predicted, strict=True):
        if p == g:
            counts[g][0] += 1
            continue
        counts[g][2] += 1
        if p is not None:
            counts[p][1] += 1
    tp, fp, fn = (sum(c[i] for c in counts.values()) for i in range(3))
    micro = prf(tp, fp, fn)
    per_class = {c: prf(*counts[c]) for c in classes}
    return {"micro_precision": micro["precision"], "micro_recall": micro["recall"], "micro_f1": micro["f1"],
            "macro_precision": _mean(s["precision"] for s in per_class.values()),
            "macro_recall": _mean(s["recall"] for s in per_class.values()),
            "macro_f1": _mean(s["f1"] for s in per_class.values()),
            "accuracy": _ratio(tp, len(gold)), "predicted": sum(p is not None for p in predicted),
            "classes": len(classes)}


def per_category(rows: list[Row]) -> dict[str, dict[str, Any]]:
    """Per MAIN category: leaf-level P/R/F1 (right leaf) and MAIN-level P/R/F1 (right category) of the
    incidents whose gold or predicted label is in it."""
    labels = [r["label"] for r in rows] + [r["predicted"] for r in rows if r.get("predicted")]
    mains = sorted({main for label in labels if (main := at_level(label, "main")) is not None})
    out: dict[str, dict[str, Any]] = {}
    for main in mains:
        gold = [r for r in rows if at_level(r["label"], "main") == main]
        pred = [r for r in rows if at_level(r.get("predicted"), "main") == main]
        leaf_tp = sum(r.get("predicted") == r["label"] for r in gold)
        main_tp = sum(at_level(r.get("predicted"), "main") == main for r in gold)
        out[str(main)] = {"n": len(gold), "predicted": len(pred),
                          "leaf": prf(leaf_tp, len(pred) - leaf_tp, len(gold) - leaf_tp),
                          "main": prf(main_tp, len(pred) - main_tp, len(gold) - main_tp)}
    return out


def pipeline_shares(rows: list[Row], correct: bool = False) -> dict[str, float | None] | None:
    """AidAI Table 3: share of all incidents resolved by pipeline 1, 1+2, 1+2+3 (with `correct`, resolved with
    the right leaf). None for methods without pipelines (the one-shot baselines)."""
    if not any(isinstance(r.get("pipeline"), int) for r in rows):
        return None
    n = len(rows)

    def upto(k: int) -> float | None:
        hits = [r for r in rows if r.get("predicted") and isinstance(r.get("pipeline"), int)
                and 1 <= r["pipeline"] <= k and (not correct or r["predicted"] == r["label"])]
        return _ratio(len(hits), n)

    return {"1": upto(1), "1+2": upto(2), "1+2+3": upto(3)}


def misses(rows: list[Row]) -> list[dict[str, Any]]:
    """The confusion list: every incident not resolved with its gold leaf, and what happened instead."""
    return [{"id": r["id"], "label": r["label"], "predicted": r.get("predicted"),
             "outcome": ("error" if r.get("error") else "escalated" if not r.get("predicted")
                         else "right category" if at_level(r["predicted"], "main") == at_level(r["label"], "main")
                         else "wrong category"),
             "pipeline": r.get("pipeline"), "confirmed": r.get("confirmed", []), "path": r.get("path", []),
             "explored": r.get("explored", []), "error": r.get("error")}
            for r in rows if r.get("predicted") != r["label"]]


def is_control(row: Row) -> bool:
    return bool(row.get("control"))


def false_confirmations(rows: list[Row]) -> int:
    """Non-control rows whose prediction is wrong and backed by strong check evidence."""
    return sum(bool(r.get("predicted")) and r["predicted"] != r["label"] and r.get("evidence") == "strong"
               for r in rows if not is_control(r))


def control_scores(rows: list[Row]) -> dict[str, Any]:
    """How often a method names a cause where none was left (None when there are no controls)."""
    controls = [r for r in rows if is_control(r)]
    predicted = [r for r in controls if r.get("predicted")]
    return {"controls": len(controls), "controls_confirmed": _ratio(len(predicted), len(controls)),
            "controls_confirmed_n": len(predicted),
            "controls_confirmed_strong": _ratio(sum(r.get("evidence") == "strong" for r in predicted), len(controls))}


def claim_levels(rows: list[Row]) -> dict[str, Any] | None:
    """Per level of the first claimed cause (confirmed, probable): how many claims, how many right (controls: a
    claim is never right), and the suspected-only escalations (a suspicion is not a claim). None for a method
    whose claims carry no level (the one-shot baselines and CVD choose; they do not attribute)."""
    if not any(r.get("level") for r in rows):
        return None
    out: dict[str, Any] = {}
    for level in ("confirmed", "probable"):
        claimed = [r for r in rows if r.get("predicted") and (r.get("level") or "confirmed") == level]
        right = sum(r["predicted"] == r["label"] for r in claimed if not is_control(r))
        out[level] = {"claims": len(claimed), "right": right, "precision": _ratio(right, len(claimed)),
                      "controls": sum(is_control(r) for r in claimed)}
    suspected = [r for r in rows if not r.get("predicted") and r.get("suspected") and not is_control(r)]
    out["suspected"] = {"escalations": len(suspected),
                        "right_first": sum(r["suspected"][0] == r["label"] for r in suspected),
                        "right_any": sum(r["label"] in r["suspected"] for r in suspected)}
    return out


def reliability(rows: list[Row]) -> list[dict[str, Any]]:
    """For each level and confidence decile of the first claimed cause: claims, their mean confidence, and how many
    were the labelled cause (controls included: every claim there is wrong)."""
    cells: dict[tuple[str, int], list[tuple[float, bool]]] = {}
    for r in rows:
        if r.get("predicted") and r.get("confidence") is not None:
            confidence = float(r["confidence"])
            key = (r.get("level") or "confirmed", min(int(confidence * 10), 9))
            cells.setdefault(key, []).append((confidence, not is_control(r) and r["predicted"] == r["label"]))
    return [{"level": level, "decile": decile, "claims": len(v), "right": sum(ok for _, ok in v),
             "mean_confidence": _mean(c for c, _ in v)} for (level, decile), v in sorted(cells.items())]


def slice_metrics(rows: list[Row]) -> dict[str, Any]:
    """The few numbers a breakdown (per view, per node count) shows for its rows."""
    scored = [r for r in rows if not is_control(r)]
    leaf = level_metrics([r["label"] for r in scored], [r.get("predicted") for r in scored])
    wrong = false_confirmations(rows)
    return {"n": len(rows), "scored": len(scored), "errors": sum(bool(r.get("error")) for r in rows),
            "leaf_micro_f1": leaf["micro_f1"], "false_confirmations": wrong,
            "false_confirmation_rate": _ratio(wrong, len(scored)), **control_scores(rows)}


def breakdown(rows: list[Row], field: str, default: Any) -> dict[str, dict[str, Any]]:
    """slice_metrics per value of a row field (missing or None: `default`), in the values' natural order; keys are
    strings so the result survives JSON."""
    def value(row: Row) -> Any:
        return default if row.get(field) is None else row[field]

    def order(v: Any) -> tuple[int, float, str]:  # numbers by size (2 before 16), then anything else by name
        number = isinstance(v, int | float) and not isinstance(v, bool)
        return (0, float(v), "") if number else (1, 0.0, str(v))

    return {str(v): slice_metrics([r for r in rows if value(r) == v]) for v in sorted({value(r) for r in rows},
                                                                                     key=order)}


def control_misses(rows: list[Row]) -> list[dict[str, Any]]:
    """Controls that named a cause anyway, in the shape of `misses` (the label is the removed cause's)."""
    return [{"id": r["id"], "label": r["label"], "predicted": r["predicted"],
             "outcome": f"control confirmed ({r.get('evidence') or 'no'} evidence)", "pipeline": r.get("pipeline"),
             "confirmed": r.get("confirmed", []), "path": r.get("path", []), "explored": r.get("explored", []),
             "error": r.get("error")}
            for r in rows if is_control(r) and r.get("predicted")]


def compute_metrics(rows: list[Row]) -> dict[str, Any]:
    """Everything the tables and `--json` show for one method's rows."""
    ok = [r for r in rows if not r.get("error")]
    scored = [r for r in rows if not is_control(r)]  # the rows that have a right leaf
    gold = [r["label"] for r in scored]
    out: dict[str, Any] = {"n": len(rows), "scored": len(scored), "errors": len(rows) - len(ok),
                           "resolved": _ratio(sum(bool(r.get("predicted")) for r in scored), len(scored))}
    for level in LEVELS:
        out[level] = level_metrics([str(at_level(g, level)) for g in gold],
                                   [at_level(r.get("predicted"), level) for r in scored])
    out["false_confirmations"] = false_confirmations(rows)
    out["false_confirmation_rate"] = _ratio(out["false_confirmations"], len(scored))
    out.update(control_scores(rows))
    out["by_view"] = breakdown(rows, "view", "bare-metal")
    out["by_nodes"] = breakdown(rows, "nodes", 1)
    out["per_category"] = per_category(scored)
    out["pipeline_share"] = pipeline_shares(scored)
    out["pipeline_share_correct"] = pipeline_shares(scored, correct=True)
    for key, field in EFFICIENCY.items():
        out[key] = _mean(r.get(field) for r in ok)
    out["wall_s_median"] = _quantile([r.get("wall_s") for r in ok], 0.5)
    out["reason_s_median"] = _quantile([r.get("reason_s") for r in ok], 0.5)
    out["reason_s_p90"] = _quantile([r.get("reason_s") for r in ok], 0.9)
    nearest = [r["nearest_history"] for r in ok if r.get("nearest_history") is not None]
    out["nearest_history_median"] = _quantile(nearest, 0.5)
    out["nearest_history_max"] = round(max(nearest), 4) if nearest else None
    unresolved = [r for r in scored if not r.get("predicted") and not r.get("error")]
    out["escalated"] = len(unresolved)
    out["escalated_explored_right_sub"] = sum(
        any(at_level(lb, "sub") == at_level(r["label"], "sub") for lb in r.get("explored", [])) for r in unresolved)
    out["levels"] = claim_levels(rows)
    out["reliability"] = reliability(rows)
    out["misses"] = misses(scored) + control_misses(rows)
    return out


# ---- unseen incidents (AidAI Table 4) ------------------------------------------------------------------------
def nearest_kept(label: str, removed: Iterable[str]) -> str:
    """The closest ancestor of `label` that was not removed ('' when none below ROOT is left)."""
    gone = set(removed)
    parts = label.split(".")
    while parts and ".".join(parts) in gone:
        parts.pop()
    return ".".join(parts)


def unseen_metrics(after: list[Row], before: list[Row], removed: list[str]) -> dict[str, Any]:
    """The incidents whose label was removed: how often the system still lands under the nearest remaining
    ancestor (the parent when it survived, else the category), picks something else, or escalates."""
    gone = set(removed)
    affected = [r for r in after if r["label"] in gone]
    before_by_id = {r["id"]: r for r in before}
    rows = []
    for r in affected:
        anchor = nearest_kept(r["label"], gone)
        predicted = r.get("predicted")
        if r.get("error"):
            outcome = "error"
        elif not predicted:
            outcome = ("escalated, exploration points under " + anchor
                       if anchor and any(lb.startswith(anchor + ".") for lb in r.get("explored", [])) else "escalated")
        elif anchor and predicted.startswith(anchor + "."):
            outcome = "sibling under " + anchor
        elif at_level(predicted, "main") == at_level(r["label"], "main"):
            outcome = "same category, other branch"
        else:
            outcome = "other category"
        prior = before_by_id.get(r["id"], {})
        rows.append({"id": r["id"], "label": r["label"], "anchor": anchor or "ROOT", "predicted": predicted,
                     "outcome": outcome, "before": prior.get("predicted"), "path": r.get("path", [])})
    summary = _unseen_summary(rows, bool(before))
    by_label = {label: _unseen_summary([r for r in rows if r["label"] == label], bool(before))
                for label in dict.fromkeys(r["label"] for r in rows)}
    return {"removed": removed, **summary, "by_label": by_label, "rows": rows}


def _unseen_summary(rows: list[dict[str, Any]], has_before: bool) -> dict[str, Any]:
    n = len(rows)
    return {"affected": n,
            "accuracy_before": _ratio(sum(r["before"] == r["label"] for r in rows), n) if has_before else None,
            "accuracy_after": _ratio(sum(r["outcome"].startswith("sibling") for r in rows), n),
            "main_accuracy_after": _ratio(sum(at_level(r["predicted"], "main") == at_level(r["label"], "main")
                                              for r in rows if r["predicted"]), n),
            "escalated": _ratio(sum(r["outcome"].startswith("escalated") for r in rows), n)}
