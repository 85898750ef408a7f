"""The input policy of agent/textinput.py: any encoding decoded right, control characters dropped, a binary
refused with one message, a large log excerpted (its error lines kept) and attached whole."""

from __future__ import annotations

import gzip
import hashlib
import random
from pathlib import Path

import pytest

from agent.history.signatures import _ERRORISH
from agent.incident import Incident
from agent.reasoning.prompts import ERRORISH
from agent.reasoning.text_signals import ERROR_LINE, key_lines
from agent.textinput import (
    DEFAULT_LIMIT,
    EXCERPT_CHARS,
    LIMIT_ENV,
    NotText,
    clean,
    hold,
    receive_bytes,
    receive_text,
    save_files,
)

GBK_LOG = ("[2026-03-01 10:00:01] 错误: CUDA 内存不足，训练进程已终止 (rank 3)\n"
           "[2026-03-01 10:00:02] NCCL WARN 通信超时: 节点 gpu-node-07 无响应\n")
LATIN1_LOG = ("2026-03-01 10:00:01 ERREUR: température GPU élevée (92 °C), arrêt du job sur le nœud 7\n"
              "2026-03-01 10:00:02 Fehler: Verbindung über InfiniBand verloren, Größe 3\n").replace("œ", "oe")
RANDOM = random.Random(7)


def random_bytes(size: int) -> bytes:
    return RANDOM.randbytes(size)


@pytest.mark.parametrize(("text", "encoding"), [
    (GBK_LOG, "gbk"), (GBK_LOG, "gb18030"), ("错误: GPU 温度过高\n", "gbk"),  # one short line: also valid cp949
    (LATIN1_LOG, "latin-1"), (LATIN1_LOG, "cp1252"), ("caf\xe9 NCCL timeout", "latin-1"),
    ("Erreur – la tâche s’est arrêtée “NCCL timeout”\n", "cp1252"),
    ("エラー: GPU メモリ不足のため学習を停止しました\n", "shift_jis"),
    ("Ошибка: недостаточно памяти GPU на узле\n", "cp1251"),
    (GBK_LOG, "utf-8"), (GBK_LOG, "utf-8-sig"), (GBK_LOG, "utf-16"), (LATIN1_LOG, "utf-16-be"),
])
def test_any_encoding_is_decoded_without_mojibake(text: str, encoding: str) -> None:
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data  # with its BOM
    assert receive_bytes(data, "err.log").text == text


def test_a_gbk_log_with_a_few_characters_on_every_line_is_still_gbk() -> None:
    lines = [f"[10:{i % 60:02d}] step {i} loss 0.{i % 97:04d} 训练中 \x1b[32mok\x1b[0m" for i in range(400)]
    got = receive_bytes("\n".join(lines).encode("gbk"), "train.log")
    assert got.encoding == "gb18030"
    assert got.text.splitlines()[5] == "[10:05] step 5 loss 0.0005 训练中 ok"


def test_an_argument_the_locale_could_not_decode_is_decoded_from_its_bytes() -> None:
    argv = GBK_LOG.encode("gbk").decode("utf-8", "surrogateescape")  # what Python makes of GBK argv bytes
    assert receive_text(argv, "the incident text").text == GBK_LOG


def test_control_characters_are_stripped() -> None:
    raw = ("\x1b[31mRuntimeError\x1b[0m: CUDA error\r\n\x1b]0;title\x07next\tline\x07\x08\x7f\x85\r"
           "progress 50%\rprogress 100%\ufeff\n")
    want = "RuntimeError: CUDA error\nnext\tline\nprogress 50%\nprogress 100%\n"
    assert clean(raw) == want
    assert receive_bytes(raw.encode("utf-8"), "err.log").text == want
    assert receive_text(raw, "the incident field").text == want


@pytest.mark.parametrize("size", [16, 64, 300, 4096, 100_000])
def test_random_bytes_are_refused_with_one_message(size: int) -> None:
    with pytest.raises(NotText) as refused:
        receive_bytes(random_bytes(size), "/some/where/random.bin")
    message = str(refused.value)
    assert message.startswith("random.bin is not text: received ")  # what was received: the name, size, kind
    assert "binary data" in message
    assert "send the error log as text" in message  # what to send


def test_archives_binaries_and_control_noise_are_refused() -> None:
    with pytest.raises(NotText, match=r"a gzip archive \(unpack it"):
        receive_bytes(gzip.compress(GBK_LOG.encode() * 20), "err.log.gz")
    with pytest.raises(NotText, match=r"an ELF executable .*NUL bytes, the first at byte 7"):
        receive_bytes(b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 64, "core")
    with pytest.raises(NotText, match="byte order mark"):
        receive_bytes(b"\xff\xfe" + random_bytes(2000), "x.log")
    with pytest.raises(NotText, match="NUL characters"):
        receive_text("Xid 79\x00\x00", "the incident field")
    with pytest.raises(NotText, match="control characters"):
        receive_text("\x01\x02\x03\x04\x05 Xid 79 \x06\x07\x0e\x0f\x10\x11", "the incident field")


def make_large_log(path: Path, size: int) -> list[str]:
    """A training log of SIZE bytes (UTF-8, CRLF, colours) with a few error lines; returns the error lines."""
    errors = ["[2026-03-01 11:00:00] RuntimeError: CUDA error: uncorrectable ECC error encountered",
              "[2026-03-01 11:00:01] NVRM: Xid (PCI:0000:3b:00): 48, pid=4242, DBE (double bit error)",
              "[2026-03-01 11:00:02] NCCL WARN Call to ibv_poll_cq failed with error 12 on rank 3"]
    filler = "[2026-03-01 10:00:00] step {i} loss 0.4321 lr 3e-4 tokens/s 51234 \x1b[32mok\x1b[0m 训练中\r\n"
    chunks, total, i = [], 0, 0
    while total < size:
        if i in (5_000, 12_000, 20_000):
            line = errors[(5_000, 12_000, 20_000).index(i)] + "\r\n"
        elif i % 3_000 == 1_000:  # a repeated warning: shown once
            line = "[2026-03-01 10:00:00] NCCL WARN Call to connect returned Connection timed out, retrying\r\n"
        else:
            line = filler.format(i=i)
        chunks.append(line)
        total += len(line.encode())
        i += 1
    path.write_bytes("".join(chunks).encode())
    return errors


def test_a_large_log_is_excerpted_and_attached_whole(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    errors = make_large_log(log, DEFAULT_LIMIT + 300_000)
    data = log.read_bytes()
    got = receive_bytes(data, str(log))
    assert got.excerpted and got.size == len(data) and got.sha256 == hashlib.sha256(data).hexdigest()
    text = got.text
    assert len(text) < EXCERPT_CHARS + 2_000  # bounded, whatever the log's size
    for line in errors:  # every error line, whole, with its context
        assert line in text.splitlines()
    assert text.count("Connection timed out") == 1  # a repeat is shown once
    assert text.splitlines()[0].startswith("[2026-03-01 10:00:00] step 0 ")  # the head (and the title) first
    assert "repeats of lines of note shown above" in text
    assert text.splitlines()[-1].startswith("# aidai: an excerpt of a 2.3 MiB log")
    assert "\x1b" not in text and "\r" not in text
    assert 120 < got.excerpted_lines < 200 and got.lines == data.count(b"\n")
    # the markers are `#` lines that no error-line pattern picks up, so the key lines are the log's own
    for marker in (line for line in text.splitlines() if line.startswith("# ")):
        assert not (ERROR_LINE.search(marker) or ERRORISH.search(marker) or _ERRORISH.search(marker)), marker
    assert set(errors) <= set(key_lines(text))

    incident = hold(Incident(text=text), [got])
    assert incident.files[0].path == "" and incident.files[0].sha256 == got.sha256
    saved = save_files(incident.model_copy(update={"hosts": ["local"]}), tmp_path / "run.attachments")
    attached = saved.files[0]
    assert attached.name == "train.log" and attached.bytes == len(data)
    assert Path(attached.path).read_bytes() == data  # byte for byte, CRLF and colours included
    assert attached.sha256 == hashlib.sha256(data).hexdigest()
    assert "_unsaved" not in saved.model_dump_json() and "files" in saved.model_dump()


def test_the_limit_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "INFO step ok\n" * 1000 + "RuntimeError: CUDA error: an illegal memory access\n" + "INFO step ok\n" * 1000
    assert not receive_text(text, "the incident field").excerpted
    monkeypatch.setenv(LIMIT_ENV, "4096")
    small = receive_text(text, "the incident field")
    assert small.excerpted and "RuntimeError: CUDA error: an illegal memory access" in small.text
    assert small.whole == text.encode()
    assert [f.name for f in hold(Incident(text=small.text), [small]).files] == ["incident.txt"]
    monkeypatch.setenv(LIMIT_ENV, "lots")
    with pytest.raises(ValueError, match=LIMIT_ENV):
        receive_text(text, "the incident field")
