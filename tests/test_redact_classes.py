"""Redaction classes found by held-back secrets and over-redaction (issue 35), each on a line in its real format:
host names in nccl-tests device lines, IPv6 addresses in NCCL bootstrap lines, an API key sent as curl's user name,
a key in a build-config field, ODBC passwords, Api-Token headers; and the other way round, public names that stay
and the provider's own node names on the provider's own page."""

from __future__ import annotations

import pytest

from agent.redact import Redactor, is_public_host


@pytest.mark.parametrize(("line", "host"), [
    ("#  Rank  0 Group  0 Pid 895544 on     h100-2 device  0 [0002:00:01] NVIDIA H100 80GB HBM3", "h100-2"),
    ("#  Rank  7 Group  0 Pid 895551 on H100-Node-B7 device  7 [0xdb] NVIDIA H100 80GB HBM3", "H100-Node-B7"),
    ("#  Rank  3 Group  0 Pid  12345 on  DgxA100b device  3 [0x47] NVIDIA A100-SXM4-80GB", "DgxA100b"),
])
def test_nccl_tests_device_lines_lose_the_host_and_keep_the_device(line: str, host: str) -> None:
    redactor = Redactor()
    out = redactor.text(line + "\n" + f"{host.lower()} finished")
    assert host not in out and host.lower() not in out
    assert out.count("<host-1>") == 2  # the same node in another case is the same placeholder
    assert "device" in out and "NVIDIA" in out and ("[0002:00:01]" in out or "[0x" in out)


@pytest.mark.parametrize(("line", "ip"), [
    ("gpu-node-3:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:fe80::1ff:fe23:4567:890a%eth0<0>",
     "fe80::1ff:fe23:4567:890a"),
    ("NCCL INFO NET/Socket : Using [0]ib0:2001:db8:85a3::8a2e:370:7334<0>", "2001:db8:85a3::8a2e:370:7334"),
    ("NCCL INFO NET/Socket : Using [1]eth1:2001:0db8:0000:0000:0000:ff00:0042:8329<0>",
     "2001:0db8:0000:0000:0000:ff00:0042:8329"),
    ("NCCL INFO Bootstrap : Using enp5s0:fe80::a00:27ff:fe4e:66a1%enp5s0<0>", "fe80::a00:27ff:fe4e:66a1"),
])
def test_ipv6_after_an_interface_name_is_redacted_and_the_interface_kept(line: str, ip: str) -> None:
    out = Redactor().text(line)
    assert ip not in out and "<ip-1>" in out
    iface = line.split(ip)[0].rsplit(" ", 1)[-1]
    assert iface in out  # "eth0:", "[0]ib0:" stay: NCCL's interface choice is evidence


def test_ipv6_rule_leaves_times_pci_ids_and_states_alone() -> None:
    text = "12:30:01 0000:5d:00.0 eth0:up mlx5_0:1 port 1:ACTIVE NCCL INFO Channel 00/32 : 0 1"
    assert Redactor().text(text) == text


@pytest.mark.parametrize(("line", "secret"), [
    ('curl -u "sk_live_4eC39HqLyjWDarjtT1zdp7dc:" https://api.stripe.com/v1/charges', "sk_live_4eC39HqLyjWDarjtT1zd"),
    ("curl -s -u 'Hunter2Token:' https://jira.example.com/rest/api/2/issue", "Hunter2Token"),
    ('buildConfigField "String", "API_KEY", "\\"AbCdEf0123456789xyz\\""', "AbCdEf0123456789xyz"),
    ('buildConfigField("String", "MAPS_API_KEY", "\\"q1w2e3r4t5y6\\"")', "q1w2e3r4t5y6"),
    ("Driver={ODBC Driver 18 for SQL Server};Server=tcp:db1,1433;Database=train;Uid=svc_ml;Pwd={S3cr;pa55};"
     "Encrypt=yes;", "pa55"),
    ("DRIVER={PostgreSQL Unicode};SERVER=pg;PORT=5432;DATABASE=x;UID=ml;PWD=Zx9!kq;", "Zx9!kq"),
    ("Server=tcp:db1,1433;Password={a}}b;c};Encrypt=yes", "b;c"),
    ("Api-Token abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz"),
    ("curl --header Api-Token:abcdefghijklmnopqrstuv https://dt.example.com/api", "abcdefghijklmnopqrstuv"),
    ('headers = {"X-Api-Token": "Zq8xYw7vUt6s"}', "Zq8xYw7vUt6s"),
])
def test_secret_formats(line: str, secret: str) -> None:
    out = Redactor().text(line)
    assert secret not in out, out
    assert "<secret-1>" in out


def test_the_odbc_rule_keeps_the_rest_of_the_connection_string() -> None:
    out = Redactor().text("Driver={ODBC Driver 18 for SQL Server};Database=train;Pwd={S3cr;pa55};Encrypt=yes;")
    assert out == "Driver={ODBC Driver 18 for SQL Server};Database=train;Pwd=<secret-1>;Encrypt=yes;"


@pytest.mark.parametrize("url", [
    "https://github.com/tensorflow/tensorflow/issues/61553", "https://docs.nvidia.com/deploy/xid-errors/index.html",
    "https://download.pytorch.org/whl/cu121", "https://files.pythonhosted.org/packages/torch", "nvcr.io/nvidia/pytorch",
])
def test_public_names_a_provider_needs_stay(url: str) -> None:
    text = f"the job fails like {url} says"
    assert Redactor().text(text) == text


def test_customer_names_next_to_public_ones_still_go() -> None:
    out = Redactor().text("see https://github.com/pytorch/pytorch/issues/1 ; our mirror pypi.acme-corp.internal and "
                          "bucket ckpt.s3.amazonaws.com; notgithub.com")
    assert "github.com/pytorch" in out
    for name in ("acme-corp", "ckpt.s3.amazonaws.com", "notgithub.com"):
        assert name not in out
    assert is_public_host("docs.nvidia.com") and not is_public_host("evil-nvidia.com")


def test_the_provider_page_keeps_its_own_node_names_and_nothing_else() -> None:
    redactor = Redactor(hostnames=["h100-node-7"])
    ticket = redactor.data({"hosts": ["h100-node-7"], "action": "drain the node, then reset GPU3 on h100-node-7",
                            "incident": "job of alice@corp.example on h100-node-7 and pod train-7c9d8-x2k4q failed; "
                                        "token=ghp_abcdefghijklmnopqrstuvwxyz0123"})
    assert "h100-node-7" not in str(ticket)
    page = redactor.restore_names(ticket, ["H100-Node-7"])
    assert page["hosts"] == ["h100-node-7"]
    assert page["action"] == "drain the node, then reset GPU3 on h100-node-7"
    for gone in ("alice", "corp.example", "ghp_", "train-7c9d8-x2k4q"):
        assert gone not in page["incident"]
    assert redactor.restore_names(ticket, []) == ticket
