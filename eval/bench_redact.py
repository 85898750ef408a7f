"""Whether redaction holds: per family, how many public secret-scanner test strings (tests/fixtures/redact/secrets/)
survive redaction whole or in part; how much of the real GPU/training logs in tests/fixtures is redacted that is no
secret, host, user, address or path (false redaction); and how many structured-evidence ids it touches.

    .venv/bin/python -m eval.bench_redact [--out eval/results/redact.md] [--redactor OLD/redact.py]

`--redactor` measures another version of agent/redact.py (its `Redactor` class), e.g. a copy of an older one.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
CASES = FIXTURES / "redact" / "secrets" / "cases.jsonl"
REAL_LOG_DIRS = ("gpu", "net", "corpus", "sys")
SENSITIVE = FIXTURES / "redact" / "real_logs_sensitive.txt"
EVIDENCE_LINES = FIXTURES / "redact" / "evidence.txt"
_PLACEHOLDER = re.compile(r"<(?:secret|private-key|email|path|user|host|ip)-\d+>")
# the forms of structured evidence, written here independently of agent/redact.py
EVIDENCE_FORMS = re.compile(
    r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+:[A-Za-z][\w.-]*"  # check:finding
    r"|\bs?xid_\d+\b"
    r"|\b[A-Z][A-Z0-9]*(?:\.[A-Z][A-Z0-9_]*)+\b"  # taxonomy labels
    r"|\bGPU-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b"
    r"|\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b"  # PCI
    r"|\b(?:GPU|nvidia-nvswitch|mlx5_)\d+\b"
    r"|(?<![\w.:])\d+(?:\.\d+)+(?:[-+][A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*)+"  # versions with a build part
    r"|(?:/[\w.+-]+)+\.(?:py|go|cpp|cu|c|h)\b")  # source files


@dataclass
class Result:
    whole: Counter[str] = field(default_factory=Counter)
    part: Counter[str] = field(default_factory=Counter)
    total: Counter[str] = field(default_factory=Counter)
    survivors: list[str] = field(default_factory=list)
    tokens: int = 0
    redacted: int = 0
    false: Counter[str] = field(default_factory=Counter)
    evidence: int = 0
    evidence_touched: list[str] = field(default_factory=list)
    not_restored: list[str] = field(default_factory=list)


def load_redactor(path: Path | None) -> Callable[[], Any]:
    if path is None:
        from agent.redact import Redactor

        return Redactor
    spec = importlib.util.spec_from_file_location("redact_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Redactor  # type: ignore[no-any-return]


def cases() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CASES.read_text(encoding="utf-8").splitlines() if line.strip()]


def real_logs() -> list[Path]:
    files = [p for d in REAL_LOG_DIRS for p in sorted((FIXTURES / d).rglob("*")) if p.is_file() and p.suffix != ".md"]
    return [*files, FIXTURES / "redact" / "realistic.log"]


def sensitive_values() -> set[str]:
    lines = SENSITIVE.read_text(encoding="utf-8").splitlines()
    return {line for line in lines if line and not line.startswith("#")}


def evidence_text() -> str:
    from agent.checks.manifest import load_manifest
    from agent.taxonomy import load_taxonomy

    labels = [node.label for node in load_taxonomy().leaves()]
    return "\n".join([EVIDENCE_LINES.read_text(encoding="utf-8"), *labels, *load_manifest().ids()])


def survives(secret: str, out: str) -> str | None:
    """'whole' when the secret is still in the output, 'part' when a 6+ character piece of it is, else None."""
    if secret in out:
        return "whole"
    bare = _PLACEHOLDER.sub(" ", out)
    pieces = [p for p in re.split(r"[^A-Za-z0-9]+", secret) if len(p) >= 6]
    return "part" if any(p in bare for p in pieces) else None


def measure(make: Callable[[], Any]) -> Result:
    result = Result()
    for case in cases():
        redactor = make()
        out = redactor.text(case["text"])
        result.total[case["family"]] += 1
        kind = survives(case["secret"], out)
        if kind == "whole":
            result.whole[case["family"]] += 1
        elif kind == "part":
            result.part[case["family"]] += 1
        if kind:
            result.survivors.append(f"{case['id']} {case['family']} {kind}: {case['secret'][:40]}")
        if redactor.restore(out) != case["text"]:
            result.not_restored.append(str(case["id"]))
    legit = sensitive_values()
    for path in real_logs():
        text = path.read_text(encoding="utf-8", errors="replace")
        redactor = make()
        out = redactor.text(text)
        result.tokens += len(text.split())
        for placeholder, value in redactor.originals.items():
            n = out.count(placeholder)
            result.redacted += n
            if value not in legit:
                result.false[value] += n
        if redactor.restore(out) != text:
            result.not_restored.append(str(path.relative_to(ROOT)))
    text = "\n".join([evidence_text(), *(p.read_text(encoding="utf-8", errors="replace") for p in real_logs())])
    out = make().text(text)
    for token, n in Counter(m.group(0) for m in EVIDENCE_FORMS.finditer(text)).items():
        result.evidence += n
        if out.count(token) < n:
            result.evidence_touched.append(token)
    return result


def report(result: Result, label: str) -> list[str]:
    fams = sorted(result.total)
    whole, part, total = sum(result.whole.values()), sum(result.part.values()), sum(result.total.values())
    false = sum(result.false.values())
    lines = [f"## {label}", "", "| family | cases | survive whole | survive in part |", "|---|---:|---:|---:|",
             *[f"| {f} | {result.total[f]} | {result.whole[f]} | {result.part[f]} |" for f in fams],
             f"| **total** | **{total}** | **{whole}** | **{part}** |", "",
             f"- false redaction on the real logs: {false} of {result.tokens} tokens "
             f"({100 * false / max(result.tokens, 1):.2f} %; {result.redacted} redactions in all)",
             f"- structured-evidence ids touched: {len(result.evidence_touched)} distinct ids (of {result.evidence} "
             "evidence occurrences in the real logs and tests/fixtures/redact/evidence.txt)"
             + (f": {', '.join(sorted(result.evidence_touched)[:12])}" if result.evidence_touched else ""),
             f"- not restored byte-exact: {len(result.not_restored)}"]
    if result.false:
        lines.append("- falsely redacted: " + ", ".join(f"`{v[:40]}` x{n}" for v, n in result.false.most_common(12)))
    if result.survivors:
        lines.append("- survivors: " + "; ".join(f"`{s}`" for s in result.survivors[:40]))
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the markdown here (eval/results/redact.md)")
    parser.add_argument("--redactor", type=Path, action="append", default=[],
                        help="measure this redact.py too (before the current one); may repeat")
    args = parser.parse_args()
    lines = ["# Redaction: secrets that survive, evidence that does not", "",
             f"`.venv/bin/python -m eval.bench_redact` — {len(cases())} public secret-scanner cases "
             "(tests/fixtures/redact/secrets/, SOURCES.md there), real logs from tests/fixtures/"
             f"{{{','.join(REAL_LOG_DIRS)}}} and tests/fixtures/redact/realistic.log.", ""]
    for path in args.redactor:
        lines += report(measure(load_redactor(path)), f"{path}")
    lines += report(measure(load_redactor(None)), "agent/redact.py")
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
