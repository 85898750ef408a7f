"""gpu_memory_errors reads the recovery the NVIDIA driver asks for in the full `nvidia-smi -q`.

R470-R560 drivers print `GPU Reset Status` (Reset Required / Drain and Reset Recommended: Yes/No), as in the
real 535.161.08 H100 dump (tests/fixtures/gpu, see SOURCES.md). R570+ drivers print `GPU Recovery Action`
(NVML nvmlDeviceGpuRecoveryAction_t) right after that block and answer the old pair with "Requested
functionality has been deprecated" (the layout of public 570.124.06 / 575.57.08 dumps); the tests put those
lines into the real 535 dump in place of its own block.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import FakeTools
from tests.test_gpu_checks import by_args, check, gpu, ids, isolate

OLD_BLOCK = ("    GPU Reset Status\n"
             "        Reset Required                    : No\n"
             "        Drain and Reset Recommended       : No\n")


def h100_q(block: str = OLD_BLOCK) -> str:
    """The real H100 GPU0 dump as a one-GPU answer, its reset block replaced by `block`."""
    text = re.sub(r"(Attached GPUs\s+:) 8", r"\1 1", gpu("gpud_nvidia-smi-q.535.161.08.h100_gpu0_excerpt.txt"))
    assert OLD_BLOCK in text
    return text.replace(OLD_BLOCK, block)


def r570_block(action: str) -> str:
    return ("    GPU Reset Status\n"
            "        Reset Required                    : Requested functionality has been deprecated\n"
            "        Drain and Reset Recommended       : Requested functionality has been deprecated\n"
            f"    GPU Recovery Action                   : {action}\n")


def run(fake_tools: FakeTools, text: str) -> dict[str, Any]:
    fake = isolate(fake_tools)
    by_args(fake, "nvidia-smi", {"-q": text})
    return check(fake, "gpu_memory_errors")


def recovery(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in result["findings"] if f["id"].startswith("recovery_action")]


def test_old_driver_reset_not_required_passes(fake_tools: FakeTools) -> None:
    result = run(fake_tools, h100_q())
    assert result["verdict"] == "PASS", result
    assert recovery(result) == []


@pytest.mark.parametrize("field", ["Reset Required", "Drain and Reset Recommended"])
def test_old_driver_yes_fails_that_gpu(fake_tools: FakeTools, field: str) -> None:
    block = OLD_BLOCK.replace(f"{field:<34}: No", f"{field:<34}: Yes")
    assert block != OLD_BLOCK
    result = run(fake_tools, h100_q(block))
    assert result["verdict"] == "FAIL", result
    assert ids(result, "FAIL") == {("recovery_action", "GPU0")}
    assert f"{field}: Yes" in recovery(result)[0]["message"]


def test_new_driver_none_passes(fake_tools: FakeTools) -> None:
    result = run(fake_tools, h100_q(r570_block("None")))
    assert result["verdict"] == "PASS", result
    assert recovery(result) == []
    assert result["metrics"]["recovery_action"] == {"GPU0": "None"}


@pytest.mark.parametrize("action", ["Reset", "Reboot", "Drain P2P", "Drain and Reset", "GPU Reset Required",
                                    "Node Reboot Required"])
def test_new_driver_action_fails_with_nvidia_words(fake_tools: FakeTools, action: str) -> None:
    result = run(fake_tools, h100_q(r570_block(action)))
    assert result["verdict"] == "FAIL", result
    assert ids(result, "FAIL") == {("recovery_action", "GPU0")}
    assert f"GPU Recovery Action: {action}" in recovery(result)[0]["message"]


def test_field_absent_is_no_finding(fake_tools: FakeTools) -> None:
    result = run(fake_tools, h100_q(""))
    assert result["verdict"] == "PASS", result
    assert recovery(result) == []
    assert result["metrics"]["recovery_action"] == "not reported by this driver"


def test_unknown_value_is_not_judged(fake_tools: FakeTools) -> None:
    result = run(fake_tools, h100_q(r570_block("Unknown")))
    assert result["verdict"] == "PASS", result
    assert [f["severity"] for f in recovery(result)] == ["INFO"]


def test_reset_explained_by_pending_remap_is_one_finding(fake_tools: FakeTools) -> None:
    text = h100_q(OLD_BLOCK.replace(f"{'Reset Required':<34}: No", f"{'Reset Required':<34}: Yes"))
    remap = re.sub(r"(Remapped Rows\n(?:.*\n)*?\s+Pending\s+:) No", r"\1 Yes", text, count=1)
    assert remap != text
    result = run(fake_tools, remap)
    assert ids(result, "FAIL") == {("row_remap_pending", "GPU0")}
    assert "Reset Required: Yes" in result["findings"][0]["message"]


def test_titanv_560_no_reset_is_no_finding(fake_tools: FakeTools) -> None:
    # real 560.35.03 dump: Reset Required No, Drain and Reset Recommended N/A; its ECC fields are N/A
    result = run(fake_tools, gpu("gpud_nvidia-smi-q.560.35.03.titanv.txt"))
    assert result["verdict"] == "UNKNOWN"
    assert recovery(result) == []
