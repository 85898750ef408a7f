"""Redaction of what leaves the machine (LLM prompts, tickets): secrets, e-mails, users, paths, IPs and host names
go, device ids stay, and the local mapping restores them."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from agent.redact import RedactionMappingError, Redactor


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
        calls: list[dict[str, object]] = []
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
    assert calls[0]["redacted"] is True and calls[0]["model"] == "stub-model" and calls[0]["prompt_version"]
