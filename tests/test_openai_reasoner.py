"""The `openai` reasoner against a scripted OpenAI-compatible stub, and once against a real local model.

The fallback is a small deterministic fake defined here, so these tests do not depend on the offline reasoner.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agent.incident import Entities, Incident, IncidentSummary
from agent.models import CheckResult, Finding, Verdict
from agent.reasoning.base import (
    Choice,
    Evidence,
    ExplorationHypothesis,
    KBPassage,
    LeafJudgement,
    LeafStatus,
    NodeInfo,
    Observation,
    PastIncident,
    Usage,
)
from agent.reasoning.factory import ReasonerConfigError, make_reasoner
from agent.reasoning.openai_reasoner import PLACEHOLDER_KEY, OpenAIReasoner
from agent.reasoning.prompts import USER_BUDGET
from agent.reasoning.structured import ENDPOINTS, EndpointForms, Form
from tests.openai_stub import OpenAIStub

INCIDENT_TEXT = """Training job llama-70b crashed on node gpu-a17 after 3 hours.
[  812.113] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.
RuntimeError: CUDA error: unspecified launch failure
NCCL version 2.21.5+cuda12.4
rank 5 exited with code 1"""
KEY_LINES = ["[  812.113] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
             "RuntimeError: CUDA error: unspecified launch failure"]
SUMMARY = IncidentSummary(title="GPU fell off the bus", key_lines=KEY_LINES, query="\n".join(KEY_LINES),
                          text=INCIDENT_TEXT, entities=Entities(hosts=["gpu-a17"], xids=[79], ranks=[5]))
PARENT = NodeInfo(label="GPU", description="GPU hardware and driver faults")
CHILDREN = [
    NodeInfo(label="GPU.MEMORY", description="GPU memory errors (ECC, row remapping)", signatures=[r"ECC error"],
             checks=["gpu_ecc"]),
    NodeInfo(label="GPU.BUS", description="GPU lost on PCIe", signatures=[r"fallen off the bus"],
             checks=["gpu_pcie"]),
    NodeInfo(label="GPU.THERMAL", description="thermal throttling and shutdowns", signatures=[r"thermal"],
             checks=["gpu_clocks"]),
]
LEAF = NodeInfo(label="GPU.BUS.FALLEN_OFF", description="the GPU fell off the PCIe bus (Xid 79)",
                signatures=[r"Xid.*79"], checks=["gpu_pcie"], is_leaf=True)
FAIL = CheckResult(check="gpu_pcie", host="gpu-a17", verdict=Verdict.FAIL, summary="GPU 3 missing from lspci",
                   findings=[Finding(id="gpu_missing", severity="FAIL", entity="GPU3", message="not enumerated")])
PASS = CheckResult(check="gpu_ecc", host="gpu-a17", verdict=Verdict.PASS, summary="no ECC errors")
MEMORY = [Observation(node="GPU.BUS", result=FAIL), Observation(node="GPU.MEMORY", result=PASS)]
STRONG = Evidence(strength="strong", matched=["gpu_pcie:gpu_missing@GPU3 (FAIL)"])
NONE = Evidence(strength="none", rejected_by=["gpu_pcie"])
CANDIDATES = [PastIncident(id=f"inc-{i}", label=label, text=f"past incident {i}: {label}", score=0.9 - i / 10)
              for i, label in enumerate(["GPU.MEMORY.UNCORRECTABLE_ECC", "GPU.BUS.FALLEN_OFF", "NET.IB.LINK_DOWN"])]
PASSAGES = [KBPassage(doc="tsg/xid.md", title="Xid 79", text="Xid 79 means GPU.BUS.FALLEN_OFF; also check "
                      "SYSTEM.POWER.PSU_FAULT and reseat the GPU.", score=0.8),
            KBPassage(doc="tsg/power.md", title="Power", text="PSU faults drop GPUs.", score=0.5)]
NO_ENTITIES = {"hosts": [], "gpus": [], "ranks": [], "xids": [], "devices": [], "versions": [], "error_codes": []}
TESTED = [LeafJudgement(label="GPU.BUS.FALLEN_OFF", status="inconclusive", confidence=0.3, why="no check ran",
                        evidence=Evidence(strength="unknown"))]


class FakeReasoner:
    """A deterministic fallback: answers are recognisable and every call is recorded."""

    name = "fake"

    def __init__(self, confirm_anything: bool = False) -> None:
        self.usage = Usage()
        self.calls: list[str] = []
        self.confirm_anything = confirm_anything  # a broken fallback, to prove the guard holds anyway

    def summarize(self, incident: Incident) -> IncidentSummary:
        self.calls.append("summarize")
        return IncidentSummary(title="fallback summary", query=incident.text, text=incident.text)

    def rerank_history(self, summary: IncidentSummary, candidates: list[PastIncident]) -> list[PastIncident]:
        self.calls.append("rerank_history")
        return list(candidates)

    def rank_children(self, summary: IncidentSummary, parent: NodeInfo, children: list[NodeInfo],
                      memory: list[Observation], priors: dict[str, float]) -> list[Choice]:
        self.calls.append("rank_children")
        return [Choice(label=c.label, score=0.5, keep=True, why="fallback") for c in children]

    def validate_leaf(self, summary: IncidentSummary, leaf: NodeInfo, evidence: Evidence,
                      results: list[CheckResult]) -> LeafJudgement:
        self.calls.append("validate_leaf")
        status: LeafStatus = "confirmed" if self.confirm_anything or evidence.strength == "strong" else "inconclusive"
        return LeafJudgement(label=leaf.label, status=status, confidence=0.5, why="fallback", evidence=evidence)

    def explore(self, summary: IncidentSummary, memory: list[Observation], passages: list[KBPassage],
                tested: list[LeafJudgement]) -> list[ExplorationHypothesis]:
        self.calls.append("explore")
        return [ExplorationHypothesis(title="fallback hypothesis", why="fallback")]

    def conclude(self, summary: IncidentSummary, confirmed: list[LeafJudgement], memory: list[Observation]) -> str:
        self.calls.append("conclude")
        return "fallback conclusion"


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    ENDPOINTS.forget()  # what one test's endpoint refused must not carry over to a later stub on the same port
    with OpenAIStub() as server:
        yield server
    ENDPOINTS.forget()


def reasoner(stub: OpenAIStub, fallback: FakeReasoner | None = None, timeout_s: float = 10,
             only: Form | None = None) -> OpenAIReasoner:
    """A reasoner on the stub; `only` pins one form (a server that takes that form and no other matters)."""
    return OpenAIReasoner(fallback=fallback or FakeReasoner(), model="stub-model", base_url=stub.base_url,
                          api_key="test-key", timeout_s=timeout_s,
                          forms=EndpointForms(only=only) if only else None)


def ranking(*labels: str, keep: bool = True) -> dict[str, Any]:
    return {"choices": [{"label": label, "keep": keep, "why": f"because {label}"} for label in labels]}


def assert_fell_back(r: OpenAIReasoner, calls: int = 2, cause: str = "model") -> None:
    assert (r.usage.calls, r.usage.retries, r.usage.fallbacks) == (calls, 1, 1)
    assert r.usage.fallback_causes == {cause: 1}
    assert len(r.usage.errors) >= 2


# -- rank_children ---------------------------------------------------------------------------------------------

def test_rank_children_valid_answer_is_used_and_schema_offers_exactly_the_children(stub: OpenAIStub) -> None:
    stub.reply_json(ranking("GPU.BUS", "GPU.MEMORY", "GPU.THERMAL"))
    r = reasoner(stub)
    got = r.rank_children(SUMMARY, PARENT, CHILDREN, MEMORY, {"GPU.BUS": 0.7})
    assert [c.label for c in got] == ["GPU.BUS", "GPU.MEMORY", "GPU.THERMAL"]
    assert [c.score for c in got] == sorted((c.score for c in got), reverse=True)
    assert got[0].why == "because GPU.BUS"
    fmt = stub.requests[0]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    item = stub.schema()["properties"]["choices"]["items"]
    assert item["properties"]["label"]["enum"] == [c.label for c in CHILDREN]
    assert set(item["required"]) == {"label", "keep", "why"}
    assert stub.schema()["properties"]["choices"]["minItems"] == stub.schema()["properties"]["choices"][
        "maxItems"] == 3  # every child, so that a grammar cannot stop short
    prompt = stub.prompt()
    assert "fallen off the bus" in prompt and "gpu_pcie@gpu-a17: FAIL" in prompt and "gpu_missing" in prompt
    assert stub.requests[0]["model"] == "stub-model" and stub.requests[0]["temperature"] == 0
    assert (r.usage.calls, r.usage.retries, r.usage.fallbacks, r.usage.errors) == (1, 0, 0, [])


@pytest.mark.parametrize(("bad", "only"), [
    (ranking("GPU.BUS", "GPU.MEMORY", "GPU.THERMAL", "GPU.INVENTED"), "json_object"),  # unknown label
    (ranking("GPU.BUS", "GPU.MEMORY"), "json_object"),  # missing child
    (ranking("GPU.BUS", "GPU.BUS", "GPU.MEMORY"), None),  # duplicate: the schema allows it, the offer does not
    ({"choices": [{"label": "GPU.BUS"}]}, "json_object"),  # wrong shape
], ids=["unknown", "missing", "duplicate", "shape"])
def test_rank_children_invalid_answer_is_retried_then_falls_back(stub: OpenAIStub, bad: dict[str, Any],
                                                                 only: Form | None) -> None:
    stub.reply_json(bad)
    stub.reply_json(bad)
    fake = FakeReasoner()
    r = reasoner(stub, fake, only=only)
    got = r.rank_children(SUMMARY, PARENT, CHILDREN, MEMORY, {})
    assert [c.why for c in got] == ["fallback"] * 3 and fake.calls == ["rank_children"]
    assert_fell_back(r)
    assert all("invalid answer" in e for e in r.usage.errors)
    assert stub.forms() == [only or "json_schema"] * 2  # the same form twice: the model's fault, not the server's


def test_rank_children_retry_with_a_valid_answer_is_used(stub: OpenAIStub) -> None:
    stub.reply_json(ranking("GPU.BUS"))
    stub.reply_json(ranking("GPU.THERMAL", "GPU.BUS", "GPU.MEMORY"))
    r = reasoner(stub)
    got = r.rank_children(SUMMARY, PARENT, CHILDREN, [], {})
    assert got[0].label == "GPU.THERMAL"
    assert (r.usage.calls, r.usage.retries, r.usage.fallbacks, len(r.usage.errors)) == (2, 1, 0, 1)


def test_model_cannot_prune_a_child_with_failing_checks_or_matching_signature(stub: OpenAIStub) -> None:
    stub.reply_json(ranking("GPU.THERMAL", "GPU.BUS", "GPU.MEMORY", keep=False))
    got = {c.label: c for c in reasoner(stub).rank_children(SUMMARY, PARENT, CHILDREN, MEMORY, {})}
    assert got["GPU.BUS"].keep  # its check failed and its signature matches the incident
    assert not got["GPU.MEMORY"].keep and not got["GPU.THERMAL"].keep


# -- validate_leaf ---------------------------------------------------------------------------------------------

def verdict(status: str, confidence: float = 0.9) -> dict[str, Any]:
    return {"status": status, "confidence": confidence, "why": f"model says {status}"}


def test_validate_leaf_confirmed_with_strong_evidence(stub: OpenAIStub) -> None:
    stub.reply_json(verdict("confirmed", 1.7))
    r = reasoner(stub)
    got = r.validate_leaf(SUMMARY, LEAF, STRONG, [FAIL])
    assert (got.status, got.confidence, got.why, got.evidence) == ("confirmed", 1.0, "model says confirmed", STRONG)
    assert stub.schema()["properties"]["status"]["enum"] == ["confirmed", "rejected", "inconclusive"]
    assert "evidence strength: strong" in stub.prompt() and r.usage.fallbacks == 0


@pytest.mark.parametrize("strength", ["none", "unknown"])
def test_llm_confirmation_without_evidence_is_not_a_confirmation(stub: OpenAIStub, strength: str) -> None:
    stub.reply_json(verdict("confirmed"))
    fake = FakeReasoner()
    r = reasoner(stub, fake)
    got = r.validate_leaf(SUMMARY, LEAF, Evidence(strength=strength), [])  # type: ignore[arg-type]
    assert got.status != "confirmed" and got.why == "fallback" and fake.calls == ["validate_leaf"]
    assert r.usage.fallbacks == 1 and r.usage.calls == 1
    assert any("ungrounded confirmation" in e for e in r.usage.errors)


def test_llm_rejection_against_strong_evidence_defers_to_fallback(stub: OpenAIStub) -> None:
    stub.reply_json(verdict("rejected"))
    r = reasoner(stub)
    got = r.validate_leaf(SUMMARY, LEAF, STRONG, [FAIL])
    assert got.status == "confirmed" and got.why == "fallback" and r.usage.fallbacks == 1


def test_llm_rejection_without_strong_evidence_is_used(stub: OpenAIStub) -> None:
    stub.reply_json(verdict("rejected", 0.8))
    got = reasoner(stub).validate_leaf(SUMMARY, LEAF, NONE, [PASS])
    assert (got.status, got.confidence) == ("rejected", 0.8)


@pytest.mark.parametrize("garbage", [
    "yes it is confirmed!!", '{"status": "CONFIRMED", "confidence": 1, "why": ""}', '{"status": "confirmed"}',
    "", "```json\n{\"status\": \"maybe\", \"confidence\": 1, \"why\": \"\"}\n```"])
def test_garbage_never_confirms_a_leaf(stub: OpenAIStub, garbage: str) -> None:
    stub.reply_text(garbage)
    stub.reply_text(garbage)
    fake = FakeReasoner(confirm_anything=True)  # even a fallback that confirms anything is held to the evidence
    r = reasoner(stub, fake, only="text")  # a server without structured output: garbage is the model's
    got = r.validate_leaf(SUMMARY, LEAF, NONE, [PASS])
    assert got.status == "inconclusive" and fake.calls == ["validate_leaf"]
    assert_fell_back(r)


# -- summarize, rerank_history, explore, conclude --------------------------------------------------------------

def test_summarize_keeps_only_verbatim_lines_and_grounded_entities(stub: OpenAIStub) -> None:
    stub.reply_json({"title": "Xid 79 on gpu-a17", "key_lines": [*KEY_LINES, "NVRM: Xid 79 (paraphrased)"],
                     "entities": {"hosts": ["gpu-a17", "gpu-b99"], "gpus": [], "ranks": [5, 6], "xids": [79],
                                  "devices": [], "versions": [{"name": "nccl", "version": "2.21.5"},
                                                              {"name": "driver", "version": "550.1"}],
                                  "error_codes": ["CUDA_ERROR_ECC_UNCORRECTABLE"]}})
    r = reasoner(stub)
    got = r.summarize(Incident(text=INCIDENT_TEXT, environment="8x H100"))
    assert got.key_lines == KEY_LINES and got.title == "Xid 79 on gpu-a17"
    assert got.entities.hosts == ["gpu-a17"] and got.entities.ranks == [5] and got.entities.xids == [79]
    assert got.entities.versions == {"nccl": "2.21.5"} and got.entities.error_codes == []
    assert got.text == INCIDENT_TEXT and got.environment == "8x H100" and got.query.startswith(KEY_LINES[0])
    assert stub.schema()["properties"]["entities"]["additionalProperties"] is False
    assert r.usage.fallbacks == 0


def test_summarize_with_no_verbatim_line_falls_back(stub: OpenAIStub) -> None:
    for _ in range(2):
        stub.reply_json({"title": "t", "key_lines": ["an invented error line"], "entities": NO_ENTITIES})
    r = reasoner(stub)
    assert r.summarize(Incident(text=INCIDENT_TEXT)).title == "fallback summary"
    assert_fell_back(r)


def test_rerank_history_orders_by_model_and_offers_only_candidate_ids(stub: OpenAIStub) -> None:
    stub.reply_json({"order": ["inc-1", "inc-0"]})
    r = reasoner(stub)
    got = r.rerank_history(SUMMARY, CANDIDATES)
    assert [c.id for c in got] == ["inc-1", "inc-0", "inc-2"]  # the unranked one keeps its place after
    assert stub.schema()["properties"]["order"]["items"]["enum"] == ["inc-0", "inc-1", "inc-2"]
    assert reasoner(stub).rerank_history(SUMMARY, CANDIDATES[:1]) == CANDIDATES[:1]  # nothing to ask
    assert len(stub.requests) == 1


@pytest.mark.parametrize("order", [["inc-1", "inc-9"], ["inc-1", "inc-1"], []], ids=["unknown", "dup", "empty"])
def test_rerank_history_invalid_falls_back(stub: OpenAIStub, order: list[str]) -> None:
    stub.reply_json({"order": order})
    stub.reply_json({"order": order})
    fake = FakeReasoner()
    r = reasoner(stub, fake, only="json_object+schema")
    assert r.rerank_history(SUMMARY, CANDIDATES) == CANDIDATES and fake.calls == ["rerank_history"]
    assert_fell_back(r)


def test_explore_offers_tested_and_passage_labels(stub: OpenAIStub) -> None:
    stub.reply_json({"hypotheses": [{"title": "PSU fault", "why": "GPU dropped under load",
                                     "steps": ["check the BMC power log"], "related_labels":
                                     ["SYSTEM.POWER.PSU_FAULT"], "sources": ["tsg/power.md"]}]})
    r = reasoner(stub)
    got = r.explore(SUMMARY, MEMORY, PASSAGES, TESTED)
    assert [h.title for h in got] == ["PSU fault"] and got[0].related_labels == ["SYSTEM.POWER.PSU_FAULT"]
    item = stub.schema()["properties"]["hypotheses"]["items"]["properties"]
    assert item["related_labels"]["items"]["enum"] == ["GPU.BUS.FALLEN_OFF", "SYSTEM.POWER.PSU_FAULT"]
    assert item["sources"]["items"]["enum"] == ["tsg/xid.md", "tsg/power.md"]


def test_explore_unknown_label_falls_back(stub: OpenAIStub) -> None:
    bad = {"hypotheses": [{"title": "x", "why": "", "steps": [], "related_labels": ["MADE.UP"], "sources": []}]}
    stub.reply_json(bad)
    stub.reply_json(bad)
    r = reasoner(stub, only="text")
    assert [h.title for h in r.explore(SUMMARY, MEMORY, PASSAGES, TESTED)] == ["fallback hypothesis"]
    assert_fell_back(r)


def test_conclude_uses_text_and_empty_text_falls_back(stub: OpenAIStub) -> None:
    stub.reply_json({"text": "GPU 3 on gpu-a17 fell off the bus (gpu_pcie: gpu_missing)."})
    confirmed = [LeafJudgement(label=LEAF.label, status="confirmed", confidence=0.9, why="gpu_pcie FAIL",
                               evidence=STRONG)]
    r = reasoner(stub)
    assert r.conclude(SUMMARY, confirmed, MEMORY).startswith("GPU 3 on gpu-a17")
    assert "GPU.BUS.FALLEN_OFF (evidence strong" in stub.prompt()
    stub.reply_json({"text": "  "})
    stub.reply_json({"text": ""})
    assert r.conclude(SUMMARY, confirmed, MEMORY) == "fallback conclusion"
    assert (r.usage.calls, r.usage.fallbacks) == (3, 1)


# -- transport: HTTP errors, timeouts, json_object, accounting ---------------------------------------------------

def test_http_500_is_retried_then_falls_back(stub: OpenAIStub) -> None:
    stub.reply_status(500)
    stub.reply_status(503)
    r = reasoner(stub)
    assert r.conclude(SUMMARY, [], []) == "fallback conclusion"
    assert_fell_back(r, cause="endpoint")
    assert "HTTP 500" in r.usage.errors[0] and "HTTP 503" in r.usage.errors[1]
    assert stub.forms() == ["json_schema"] * 2  # a 500 that names no form is the endpoint's, not the form's


def test_http_500_then_valid_answer(stub: OpenAIStub) -> None:
    stub.reply_status(500)
    stub.reply_json({"text": "ok"})
    r = reasoner(stub)
    assert r.conclude(SUMMARY, [], []) == "ok" and (r.usage.retries, r.usage.fallbacks) == (1, 0)


def test_timeout_is_retried_then_falls_back(stub: OpenAIStub) -> None:
    stub.reply_json(verdict("confirmed"), delay=2.0)
    stub.reply_json(verdict("confirmed"), delay=2.0)
    r = reasoner(stub, timeout_s=1.0)
    start = time.monotonic()
    got = r.validate_leaf(SUMMARY, LEAF, STRONG, [FAIL])
    assert 1.9 < time.monotonic() - start < 5
    assert got.why == "fallback"
    assert_fell_back(r, cause="endpoint")
    assert all("timeout" in e for e in r.usage.errors)


def test_tokens_and_calls_are_counted(stub: OpenAIStub) -> None:
    stub.reply_json(ranking("GPU.BUS", "GPU.MEMORY", "GPU.THERMAL"))
    stub.reply_json({"text": "done"})
    r = reasoner(stub)
    r.rank_children(SUMMARY, PARENT, CHILDREN, MEMORY, {})
    r.conclude(SUMMARY, [], MEMORY)
    prompt_chars = [sum(len(m["content"]) for m in req["messages"]) for req in stub.requests]
    assert r.usage.calls == 2
    assert r.usage.prompt_tokens == sum(c // 4 for c in prompt_chars) > 0
    assert r.usage.completion_tokens > 0 and r.usage.tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_unreachable_endpoint_is_skipped_after_repeated_failures() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    r = OpenAIReasoner(FakeReasoner(), "m", f"http://127.0.0.1:{port}/v1", api_key="k", timeout_s=2)
    for _ in range(3):
        assert r.conclude(SUMMARY, [], []) == "fallback conclusion"
    assert r.usage.calls == 4 and r.usage.fallbacks == 3  # the third call did not reach for the endpoint
    assert r.usage.fallback_causes == {"endpoint": 3}
    assert any("endpoint skipped" in e for e in r.usage.errors)


def test_api_key_comes_from_aidai_env_first(stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "openai-key")
    monkeypatch.setenv("AIDAI_LLM_API_KEY", "aidai-key")
    stub.reply_json({"text": "a"})
    stub.reply_json({"text": "b"})
    OpenAIReasoner(FakeReasoner(), "m", stub.base_url).conclude(SUMMARY, [], [])
    monkeypatch.delenv("AIDAI_LLM_API_KEY")
    monkeypatch.delenv("OPENAI_API_KEY")
    OpenAIReasoner(FakeReasoner(), "m", stub.base_url).conclude(SUMMARY, [], [])
    assert [h["authorization"] for h in stub.headers] == ["Bearer aidai-key", f"Bearer {PLACEHOLDER_KEY}"]


def test_prompts_stay_within_budget_for_a_huge_incident(stub: OpenAIStub) -> None:
    log = "\n".join(f"[{i}] rank {i % 64}: step {i} loss 1.{i % 97} NCCL WARN socket timeout on mlx5_{i % 8}"
                    for i in range(20000))
    big = Incident(text="job hung\n" + log)
    many = [NodeInfo(label=f"NET.CHILD_{i}", description="a network fault " * 20, signatures=["x" * 80] * 6,
                     checks=[f"check_{j}" for j in range(8)]) for i in range(12)]
    memory = [Observation(node=f"NET.CHILD_{i % 12}", result=CheckResult(
        check=f"check_{i}", host=f"node-{i:03d}", verdict=Verdict.FAIL if i % 3 else Verdict.PASS,
        summary="some summary " * 20, findings=[Finding(id=f"f{j}", severity="FAIL") for j in range(6)]))
        for i in range(80)]
    summary = SUMMARY.model_copy(update={"key_lines": [line * 3 for line in log.splitlines()[:12]], "text": log})
    stub.reply_json({"title": "t", "key_lines": [], "entities": NO_ENTITIES})
    stub.reply_json(ranking(*[n.label for n in many]))
    stub.reply_json(verdict("inconclusive"))
    stub.reply_json({"hypotheses": [{"title": "t", "why": "", "steps": [], "related_labels": [], "sources": []}]})
    stub.reply_json({"order": ["inc-0"]})
    stub.reply_json({"text": "t"})
    r = reasoner(stub)
    r.summarize(big)
    r.rank_children(summary, PARENT, many, memory, {n.label: 0.1 for n in many})
    r.validate_leaf(summary, LEAF, STRONG, [o.result for o in memory])
    r.explore(summary, memory, PASSAGES * 10, TESTED * 20)
    r.rerank_history(summary, [c.model_copy(update={"id": f"inc-{i}", "text": "x " * 3000}) for i, c in
                               enumerate(CANDIDATES * 10)])
    r.conclude(summary, TESTED * 30, memory)
    assert r.usage.fallbacks == 0, r.usage.errors
    for req in stub.requests:
        user = req["messages"][1]["content"]
        total = sum(len(m["content"]) for m in req["messages"])
        assert len(user) <= USER_BUDGET and total <= USER_BUDGET + 700, (len(user), total)
    assert "(+" in stub.prompt(1) and "more checks not shown" in stub.prompt(1)


def test_every_child_is_shown_even_when_there_are_many(stub: OpenAIStub) -> None:
    many = [NodeInfo(label=f"SOFTWARE.FRAMEWORK.PYTORCH.VERSION_MISMATCH_{i}", description="a long story " * 30)
            for i in range(40)]
    stub.reply_json(ranking(*[n.label for n in many]))
    assert len(reasoner(stub).rank_children(SUMMARY, PARENT, many, [], {})) == 40
    prompt = stub.prompt()
    assert all(f"- {n.label}: a long" in prompt for n in many) and len(prompt) <= USER_BUDGET + 700


# -- factory ---------------------------------------------------------------------------------------------------

def test_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeReasoner()
    assert make_reasoner("offline", None, None, fake) is fake
    with pytest.raises(ReasonerConfigError, match="--model"):
        make_reasoner("openai", "http://127.0.0.1:8000/v1", None, fake)
    with pytest.raises(ReasonerConfigError, match="unknown reasoner"):
        make_reasoner("claude", None, "m", fake)
    with pytest.raises(ReasonerConfigError, match="not an http"):
        make_reasoner("openai", "127.0.0.1:8000", "m", fake)
    for var in ("AIDAI_LLM_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ReasonerConfigError, match="OPENAI_API_KEY"):
        make_reasoner("openai", None, "gpt-4o-mini", fake)
    local = make_reasoner("openai", "http://127.0.0.1:8000/v1", "qwen", fake)
    assert isinstance(local, OpenAIReasoner) and local.fallback is fake and local.model == "qwen"
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert isinstance(make_reasoner("openai", None, "gpt-4o-mini", fake), OpenAIReasoner)
