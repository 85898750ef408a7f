"""`aidai taxonomy build --llm openai`: both passes through an OpenAI-compatible endpoint (the loopback stub),
with structured output, batching, a retry on a bad answer and counted tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.history import build as builder
from agent.history.llm import build_with_llm
from agent.history.records import read_history
from agent.taxonomy import read_taxonomy_file
from tests.openai_stub import OpenAIStub

FIX = Path(__file__).parent / "fixtures" / "history"
PASS1 = {"T-1001": "GPU.MEMORY.UNCORRECTABLE_ECC", "T-1003": "GPU.MEMORY.DOUBLE_BIT_ECC",
         "T-1002": "INTERCONNECT_NETWORKING.SOCKET.IFNAME_MISCONFIG"}


def answer(request: dict[str, Any]) -> str:
    fmt = request["response_format"]["json_schema"]
    task, schema = fmt["name"], fmt["schema"]
    if task == "taxonomy_pass1":
        ids = schema["properties"]["incidents"]["items"]["properties"]["id"]["enum"]
        return json.dumps({"incidents": [{"id": i, "label": PASS1[i], "hypothesis": "the GPU or NIC is at fault.",
                                          "description": "a failure."} for i in ids]})
    if task == "taxonomy_pass2":
        offered = schema["properties"]["match"]["enum"]
        return json.dumps({"match": "GPU.MEMORY.UNCORRECTABLE_ECC" if "GPU.MEMORY.UNCORRECTABLE_ECC" in offered
                           else ""})
    return json.dumps({"description": "Refined by the model from the new incidents."})


def test_llm_passes_label_merge_and_refine_with_counted_tokens() -> None:
    records = [r for _, r in read_history(FIX / "history.jsonl").records if r.id in PASS1]
    shipped = read_taxonomy_file()
    with OpenAIStub() as stub:
        stub.reply_text("this is not JSON")  # the first batch's first answer: retried once
        stub.responder = answer
        result = build_with_llm(records, shipped, model="stub-model", base_url=stub.base_url, batch=2,
                                library=builder.library_from(shipped))
        first = stub.requests[0]["response_format"]["json_schema"]
        assert first["strict"] and first["schema"]["properties"]["incidents"]["items"]["properties"]["id"][
            "enum"] == ["T-1001", "T-1002"]  # batches of 2, ids offered as an enum
        tasks = [r["response_format"]["json_schema"]["name"] for r in stub.requests]
    assert tasks.count("taxonomy_pass1") == 3  # two batches, one retried
    assert tasks.count("taxonomy_pass2") == 1  # only the label the taxonomy lacks is asked about
    assert {e.kind for e in result.merge.events} == {"matched", "merged"}
    merged = next(e for e in result.merge.events if e.kind == "merged")
    assert (merged.label, merged.into) == ("GPU.MEMORY.DOUBLE_BIT_ECC", "GPU.MEMORY.UNCORRECTABLE_ECC")
    node = next(c for c in next(c for c in next(c for c in result.data["children"] if c["name"] == "GPU")[
        "children"] if c["name"] == "MEMORY")["children"] if c["name"] == "UNCORRECTABLE_ECC")
    assert node["description"] == "Refined by the model from the new incidents."
    usage = result.llm
    assert usage["calls"] == len(tasks) and usage["retries"] == 1 and usage["fallbacks"] == 0
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert result.problems == []
