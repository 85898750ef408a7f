"""Pick the reasoner a run uses: `offline` (the default, no network) or `openai` (any OpenAI-compatible endpoint)."""

from __future__ import annotations

import os
from typing import Literal
from urllib.parse import urlparse

from agent.reasoning.base import Reasoner

ReasonerKind = Literal["offline", "openai"]
KINDS: tuple[str, ...] = ("offline", "openai")


class ReasonerConfigError(ValueError):
    """The reasoner options do not make a usable reasoner; the message says what to pass."""


def check_base_url(base_url: str) -> None:
    parsed = urlparse(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ReasonerConfigError(f"--base-url {base_url!r} is not an http(s) URL "
                                  "(e.g. http://127.0.0.1:8000/v1 or https://NAME.openai.azure.com/openai/v1)")


def make_reasoner(kind: str, base_url: str | None, model: str | None, offline: Reasoner, *,
                  api_key: str | None = None, timeout_s: float = 60) -> Reasoner:
    """`offline` returns `offline` itself; `openai` wraps it as the fallback of an OpenAIReasoner.

    The API key comes from `api_key`, else AIDAI_LLM_API_KEY, else OPENAI_API_KEY; a local server (a --base-url)
    needs none. Nothing is sent until the first decision: a wrong URL or model shows up as errors in `usage`
    and the offline reasoner answers.
    """
    kind = (kind or "offline").strip().lower()
    if kind not in KINDS:
        raise ReasonerConfigError(f"unknown reasoner {kind!r}: choose one of {', '.join(KINDS)}")
    if kind == "offline":
        return offline
    if not model or not model.strip():
        raise ReasonerConfigError("the openai reasoner needs --model (e.g. gpt-4o-mini, or the name a vLLM, SGLang, "
                                  "Ollama or llama.cpp server serves)")
    if base_url:
        check_base_url(base_url)
    if timeout_s <= 0:
        raise ReasonerConfigError(f"the LLM timeout must be positive, got {timeout_s}")
    from agent.reasoning.openai_reasoner import OpenAIReasoner, api_key_from_env  # openai loads only when used

    key = api_key or api_key_from_env()
    if not key and not base_url and not os.environ.get("OPENAI_BASE_URL"):
        raise ReasonerConfigError("the openai reasoner talks to api.openai.com without --base-url, which needs a key: "
                                  "set AIDAI_LLM_API_KEY or OPENAI_API_KEY, or pass --base-url of a local server")
    return OpenAIReasoner(fallback=offline, model=model.strip(), base_url=base_url or None, api_key=key,
                          timeout_s=timeout_s)
