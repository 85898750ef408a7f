"""Per-investigation limits and the loop breaker: what stops a diagnosis cleanly before it runs away.

A limit reached is not an error: the graph stops searching, concludes with what it has (a ticket that says which
limit stopped it and what was tried), and the stop is checkpointed like any other step. What is spent so far
(checks executed, seconds of the graph's own steps, LLM tokens, graph steps) lives in the checkpointed state, so a
resumed run keeps counting where it left off. Time spent waiting for an operator's answer is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from typing_extensions import TypedDict  # pydantic validates these in the graph state (needs it on 3.11)

MAX_STEPS = 2000  # graph super-steps: a full walk of the taxonomy is ~400; more means a cycle


class LimitError(ValueError):
    """A limit that cannot be used (zero, negative); the message names the option."""


class Spent(TypedDict, total=False):
    checks: int  # (host, check) executions, cache hits excluded
    wall_s: float  # seconds spent inside the graph's steps
    tokens: int  # LLM prompt + completion tokens
    steps: int  # graph super-steps


class Stop(TypedDict):
    limit: str  # max_checks | max_wall_s | max_llm_tokens | loop
    message: str


@dataclass(frozen=True)
class Limits:
    """None: unlimited. The loop breaker (`max_steps`, one execution per host and check) is always on."""

    max_checks: int | None = None
    max_wall_s: float | None = None
    max_llm_tokens: int | None = None
    max_steps: int = MAX_STEPS

    def __post_init__(self) -> None:
        for name in ("max_checks", "max_wall_s", "max_llm_tokens", "max_steps"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
                raise LimitError(f"--{name.replace('_', '-')} must be a positive number, got {value!r}")

    def as_dict(self) -> dict[str, Any]:
        return {"max_checks": self.max_checks, "max_wall_s": self.max_wall_s, "max_llm_tokens": self.max_llm_tokens,
                "max_steps": self.max_steps}

    def checks_left(self, spent: Spent) -> int | None:
        return None if self.max_checks is None else max(0, self.max_checks - spent.get("checks", 0))

    def exceeded(self, spent: Spent, extra_wall_s: float = 0.0) -> Stop | None:
        """The first limit `spent` has reached, as the stop the conclusion reports; None while within all."""
        checks, tokens = spent.get("checks", 0), spent.get("tokens", 0)
        wall = spent.get("wall_s", 0.0) + extra_wall_s
        if self.max_checks is not None and checks >= self.max_checks:
            return stop("max_checks", f"check limit reached: {checks} of at most {self.max_checks} check runs")
        if self.max_wall_s is not None and wall >= self.max_wall_s:
            return stop("max_wall_s", f"time limit reached: {wall:.1f} s of at most {self.max_wall_s:g} s")
        if self.max_llm_tokens is not None and tokens >= self.max_llm_tokens:
            return stop("max_llm_tokens", f"LLM token limit reached: {tokens} of at most {self.max_llm_tokens} "
                                          "tokens")
        if spent.get("steps", 0) >= self.max_steps:
            return stop("loop", f"loop breaker: {spent.get('steps', 0)} graph steps (at most {self.max_steps})")
        return None


def stop(limit: str, message: str) -> Stop:
    return {"limit": limit, "message": message}


def add(spent: Spent, *, checks: int = 0, wall_s: float = 0.0, tokens: int = 0, steps: int = 0) -> Spent:
    """A new Spent with the amounts added (the state is never mutated in place). Seconds are not rounded here:
    rounding every step would count a run of sub-millisecond steps as no time at all."""
    return {"checks": spent.get("checks", 0) + checks, "wall_s": spent.get("wall_s", 0.0) + wall_s,
            "tokens": spent.get("tokens", 0) + tokens, "steps": spent.get("steps", 0) + steps}
