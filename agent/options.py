"""A diagnosis' options: which hosts, which reasoner, what history and knowledge, which limits and approvals, where
its data lives. Saved next to each run, so a resumed or verified run rebuilds the same hosts and reasoner."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.agents.context import Approval
from agent.checks.runner import DEFAULT_PARALLEL_HOSTS
from agent.limits import Limits
from agent.paths import default_data_dir


@dataclass
class DiagnoseOptions:
    hosts: list[str] = field(default_factory=lambda: ["local"])
    ssh: dict[str, Any] = field(default_factory=dict)  # SshOptions fields
    approval: Approval = "none"  # active/intrusive checks: run all, none, or ask (an interrupt)
    llm: str = "offline"
    base_url: str | None = None
    model: str | None = None
    profile: str | None = None
    data_dir: str | None = None
    chroma_url: str | None = None
    history: bool = True  # pipeline 1 (similar past incidents)
    seed: bool = True  # the bundled seed incidents are part of the history
    knowledge: bool = True  # pipeline 3's knowledge base
    kb_dir: str | None = None  # markdown KB to read instead of the bundled knowledge/kb
    max_feedback_rounds: int = 0  # exploration questions asked before escalating (0: none, batch runs)
    # see agent/pretriage.py
    pretriage: list[str] = field(default_factory=lambda: ["preflight", "l4", "reveal", "kaiops", "prometheus"])
    prometheus: str | None = None  # http://HOST:9090 of the fleet's Prometheus (dcgm-exporter metrics) for pre-triage
    checkpoint: bool = True
    # per-investigation limits (None: unlimited); a limit reached concludes the run with the reason
    max_checks: int | None = None
    max_wall_s: float | None = None
    max_llm_tokens: int | None = None
    operator: str = ""  # who started the run (approver of record under approval all/none); default: the OS user
    redact_llm: bool = True  # redact every prompt sent to an LLM (reversibly, the mapping stays local)
    checkpoint_url: str | None = None  # postgresql://...: the team's Postgres instead of SQLite in the data dir
    max_parallel_hosts: int = DEFAULT_PARALLEL_HOSTS  # hosts checked at once (eval/bench_fanout.py)

    def limits(self) -> Limits:
        return Limits(max_checks=self.max_checks, max_wall_s=self.max_wall_s, max_llm_tokens=self.max_llm_tokens)


def data_dir(options: DiagnoseOptions) -> Path:
    return Path(options.data_dir) if options.data_dir else default_data_dir()
