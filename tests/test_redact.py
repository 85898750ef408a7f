"""Redaction of what leaves the machine in a ticket: secrets, e-mails, IPs and host names go; device ids stay."""

from __future__ import annotations

import pytest

from agent.redact import Redactor


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
