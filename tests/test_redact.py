"""Redaction of what leaves the machine (LLM prompts, tickets): secrets, e-mails, users, paths, IPs and host names
go, device ids stay, and the local mapping restores them."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from agent.audit_records import LlmFallbackRecord, LlmRecord
from agent.redact import RedactionMappingError, Redactor
from eval.bench_redact import EVIDENCE_LINES, cases, real_logs, sensitive_values, survives


@pytest.mark.parametrize("secret", [
    "sk-proj-Abcdefghijklmnop1234", "hf_abcdefghijklmnopqrstuvwxyz", "ghp_abcdefghijklmnopqrstuvwxyz012345",
    "AKIAABCDEFGHIJKLMNOP", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
])
def test_tokens_and_keys_are_removed(secret: str) -> None:
    out = Redactor().text(f"before {secret} after")
    assert secret not in out and out.startswith("before <") and out.endswith("> after")


@pytest.mark.parametrize(("text", "gone", "kept"), [
    ("password: hunter2x", "hunter2x", "password: "),
    ("WANDB_API_KEY=0123456789abcdef token=abcdefgh", "0123456789abcdef", "WANDB_API_KEY="),
    ("Authorization: Bearer abcdefghijklmnop", "abcdefghijklmnop", "Bearer "),
    ("https://acct.blob.core.windows.net/ckpt?sv=2022-11-02&sig=AbCdEf%2BGh12", "AbCdEf%2BGh12", "&sig="),
])
def test_parameter_values_go_and_their_names_stay(text: str, gone: str, kept: str) -> None:
    out = Redactor().text(text)
    assert gone not in out and kept in out


def test_hosts_ips_and_emails_map_to_stable_placeholders() -> None:
    redactor = Redactor(hostnames=["trainer7"])
    out = redactor.text("trainer7 (10.0.0.7) cannot reach gpu-a17.cluster.local at 10.0.0.8; trainer7 retried "
                        "10.0.0.7; mail oncall@example.com; fe80::1ff:fe23:4567:890a; worker-12")
    for value in ("trainer7", "10.0.0.7", "10.0.0.8", "gpu-a17", "example.com", "fe80::", "worker-12"):
        assert value not in out
    assert out.count("<host-1>") == 2 and out.count("<ip-1>") == 2 and "<ip-2>" in out
    assert redactor.counts["email"] == 1


def test_device_ids_versions_and_code_names_are_kept() -> None:
    text = ("Xid (PCI:0000:5d:00): 48 at 12:30:01 on GPU5/gpu0 GPU-5fa2b3c4-1111-2222-3333-444455556666 mlx5_0 "
            "driver 535.161.08 NCCL 2.18.5 torch.distributed.DistBackendError ProcessGroupNCCL.cpp:1269")
    assert Redactor(hostnames=["local"]).text(text) == text


def test_json_data_is_redacted_keys_included() -> None:
    data = {"node-3|xid_scan": {"raw": ["seen on 192.168.1.20"]}, "n": 3}
    assert Redactor().data(data) == {"<host-1>|xid_scan": {"raw": ["seen on <ip-1>"]}, "n": 3}


# ---- reversible redaction: realistic logs, the local mapping, what an LLM receives ------------------------------
# secrets, users, paths, hosts and IPs as they appear in real training logs (written for these tests)
REALISTIC_LOG = (Path(__file__).parent / "fixtures" / "redact" / "realistic.log").read_text()
SENSITIVE = ["/home/alice", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
             "S3cr3t!pass", "mlops", "db.internal.example.com", "alice", "gpu-a17", "10.12.0.17", "fe80::1ff",
             "eyJhbGciOiJIUzI1NiJ9", "api.wandb.ai", "trainer7"]
KEPT = ["mlx5_0", "Xid (PCI:0000:5d:00): 48", "driver 535.161.08", "NCCL 2.18.5", "rank=5", "NCCL INFO NET/IB",
        "nvidia-smi -q", "model.safetensors"[:0]]


def test_a_realistic_log_loses_every_secret_and_name_and_restores_exactly() -> None:
    redactor = Redactor(hostnames=["trainer7"], usernames=["alice"])
    out = redactor.text(REALISTIC_LOG)
    for value in SENSITIVE:
        assert value not in out, value
    for value in KEPT:
        assert value in out, value
    assert out.count("<host-") >= 3 and "<user-" in out and "<path-1>" in out and "<secret-" in out
    assert redactor.restore(out) == REALISTIC_LOG
    assert redactor.text(REALISTIC_LOG) == out  # stable: the same value, the same placeholder
    assert redactor.restore("<host-99> was not seen") == "<host-99> was not seen"


def test_a_private_key_cut_off_before_its_end_line_is_still_removed() -> None:
    out = Redactor().text("log line\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo…")
    assert out == "log line\n<private-key-1>"


def test_the_mapping_file_is_private_and_a_new_redactor_continues_it(tmp_path: Path) -> None:
    first = Redactor(hostnames=["trainer7"])
    out = first.text("trainer7 at 10.0.0.7 token=abcdefgh1234")
    path = first.save(tmp_path / "runs" / "r1.redaction.json")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not list(path.parent.glob(".*tmp"))

    second = Redactor().load(path)
    assert second.restore(out) == "trainer7 at 10.0.0.7 token=abcdefgh1234"
    assert second.text("10.0.0.7 and 10.0.0.8") == "<ip-1> and <ip-2>"  # numbering continues

    path.write_text("{not json")
    with pytest.raises(RedactionMappingError, match="not a redaction mapping"):
        Redactor().load(path)


def test_taxonomy_labels_check_ids_and_placeholders_pass_through_unchanged() -> None:
    from agent.checks.manifest import load_manifest
    from agent.taxonomy import load_taxonomy

    words = [node.label for node in load_taxonomy().leaves()] + load_manifest().ids()
    text = "\n".join(words)
    redactor = Redactor(hostnames=["node-1"])
    assert redactor.text(text) == text
    assert redactor.text("<host-1> and <secret-2>") == "<host-1> and <secret-2>"


def test_the_llm_receives_only_placeholders_and_the_local_summary_gets_the_real_values() -> None:
    from agent.incident import Incident
    from agent.reasoning.offline import OfflineReasoner
    from agent.reasoning.openai_reasoner import OpenAIReasoner
    from agent.taxonomy import load_taxonomy
    from tests.openai_stub import OpenAIStub

    line = "gpu-a17:4121:4188 [5] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.12.0.17<0>"
    with OpenAIStub() as stub:
        redactor = Redactor(hostnames=["trainer7"], usernames=["alice"])
        reasoner = OpenAIReasoner(OfflineReasoner(load_taxonomy()), "stub-model", stub.base_url, api_key="x")
        reasoner.redactor = redactor
        calls: list[LlmRecord | LlmFallbackRecord] = []
        reasoner.on_call = calls.append

        def answer(request: dict[str, object]) -> str:  # the model repeats what it was shown: placeholders
            host = redactor.mapping["host:gpu-a17"]
            return json.dumps({"title": f"NCCL on {host}", "key_lines": [redactor.text(line)], "entities": {
                "hosts": [host], "gpus": [], "ranks": [5], "xids": [], "devices": [], "versions": [],
                "error_codes": []}})

        stub.responder = answer
        summary = reasoner.summarize(Incident(text=REALISTIC_LOG))

    sent = stub.prompt(0)
    for value in SENSITIVE:
        assert value not in sent, value
    assert "<path-1>" in sent and "mlx5_0" in sent
    assert summary.key_lines == [line] and "gpu-a17" in summary.entities.hosts  # restored, then grounded
    assert reasoner.usage.fallbacks == 0
    first = calls[0]
    assert isinstance(first, LlmRecord) and first.redacted is True and first.model == "stub-model"
    assert first.prompt_version


# ---- the public secret corpus, structured evidence, real logs ---------------------------------------------------
CASES = cases()  # the bench (eval/bench_redact.py) and these tests read the same fixtures


def test_the_secret_corpus_is_large_and_covers_every_family() -> None:
    families = {case["family"] for case in CASES}
    assert len(CASES) >= 250
    assert {"aws", "azure", "google", "slack", "jwt", "private-key", "password", "auth-header", "keyword", "vendor",
            "host", "ip", "openai", "huggingface", "github", "anthropic"} <= families
    assert all(case["secret"] in case["text"] for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=[f"{c['id']}-{c['family']}" for c in CASES])
def test_no_public_secret_survives_not_even_in_part(case: dict[str, str]) -> None:
    redactor = Redactor()
    out = redactor.text(case["text"])
    assert survives(case["secret"], out) is None, out
    assert redactor.restore(out) == case["text"]


@pytest.mark.parametrize(("text", "host"), [
    ("Jan  2 03:04:05 GENOA-01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234", "GENOA-01"),
    ("h100-2:4121:4188 [5] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB", "h100-2"),
    ("[rank3]:h100-7:88213:88410 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] via P2P/CUMEM", "h100-7"),
    ("Warning  FailedScheduling  pod/trainer-7f9c5d-x2k4p  0/16 nodes are available", "trainer-7f9c5d-x2k4p"),
    ("ssh alice@h100-2 'nvidia-smi -q'", "h100-2"),
])
def test_host_names_in_log_positions_go_everywhere_in_the_text(text: str, host: str) -> None:
    out = Redactor().text(f"{text}\nlater: {host} rebooted")
    assert host not in out and out.endswith("later: <host-1> rebooted")


EVIDENCE = ["xid_scan:xid_48@GPU3", "xid_48", "GPU3", "nvidia-nvswitch0", "mlx5_0", "23.10-1.1.9.0",
            "MLNX_OFED_LINUX-23.10-1.1.9.0", "2.20.5+cuda12.4", "0000:3b:00.0",
            "GPU-5fa2b3c4-1111-2222-3333-444455556666",
            "GPU.MEMORY.UNCORRECTABLE_ECC", "/go/src/github.com/NVIDIA/go-nvml/pkg/nvml/device.go:123",
            "/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py",
            "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269", "pcie_link:gen_downgrade@0000:3b:00.0"]


@pytest.mark.parametrize("evidence", EVIDENCE)
def test_structured_evidence_is_never_touched(evidence: str) -> None:
    for text in (evidence, f"found: {evidence}", f"{evidence}, seen on node-1 (10.0.0.7)"):
        out = Redactor(hostnames=["node-1"], usernames=["alice"]).text(text)
        assert evidence in out, out


def test_a_check_id_before_a_host_stays_and_the_host_goes() -> None:
    out = Redactor(hostnames=["node-1"]).text("found nothing: framework_versions@node-1")
    assert out == "found nothing: framework_versions@<host-1>"  # the check id is no user; the host name must go


def test_ticket_style_evidence_lines_pass_through_unchanged() -> None:
    text = EVIDENCE_LINES.read_text(encoding="utf-8")
    assert Redactor(hostnames=["trainer7"], usernames=["alice"]).text(text) == text


def test_a_log_that_repeats_lines_is_redacted_as_if_line_by_line() -> None:
    once, thrice = Redactor(hostnames=["trainer7"]), Redactor(hostnames=["trainer7"])
    assert thrice.text(REALISTIC_LOG * 3) == once.text(REALISTIC_LOG) * 3 and thrice.originals == once.originals


def test_secrets_that_differ_only_in_case_restore_exactly() -> None:
    redactor = Redactor()
    text = "password=Scatter12 and later password=scatter12"
    out = redactor.text(text)
    assert "catter12" not in out and redactor.restore(out) == text


def test_false_redaction_on_real_gpu_logs_stays_under_one_percent_and_restores() -> None:
    legit = sensitive_values()
    tokens = false = 0
    for path in real_logs():
        text = path.read_text(encoding="utf-8", errors="replace")
        redactor = Redactor()
        out = redactor.text(text)
        assert redactor.restore(out) == text, path
        tokens += len(text.split())
        false += sum(out.count(p) for p, value in redactor.originals.items() if value not in legit)
    assert tokens > 10_000 and false / tokens <= 0.01
