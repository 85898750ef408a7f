"""`aidai chat` in a pseudo-terminal, as a customer types into it, against a simulated healthy host: every question
ends on one Enter (pasted lines belong to the answer), one approval question per step for all its load tests, a
walk done again prints only what is new, the customer's version statement re-ranks the taxonomy, the suggestions
are ranked by relevance, and the closing words say who acts and what a chat user can do.

Each `expect` waits for the chat's own output, never for a time: the timeouts only stop a broken run."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from agent.sim.scenario import create_scenario

pexpect = pytest.importorskip("pexpect")

INCIDENT = ["training of llama3-70B with ZeRO-3 on hosts gpu-node-07 crashes:",
            "RuntimeError: CUDA error: an illegal memory access was encountered"]
STATEMENT = "deepspeed 0.15.3 works, 0.16.4 fails"
WAIT_S = 600  # a stuck run fails the test; a slow machine does not
# the chat in this process's interpreter, with the session's one-document KB (indexing the real one takes a minute)
LAUNCH = ("import sys; from pathlib import Path; from agent.knowledge import kb_index; "
          "kb_index.KB_DIR = Path(sys.argv[1]); from agent.cli.main import app; "
          "app(sys.argv[2:], prog_name='aidai')")
APPROVAL = r"(?s)Run (?:it|them)\?.*?\(Enter: \w+\) "
FEEDBACK = r"(?s)What else do you see.*?\n> "
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return create_scenario(tmp_path_factory.mktemp("sim") / "healthy").root


def test_chat_in_a_terminal(healthy: Path, data_dir: Path, tiny_kb: Path, tmp_path: Path) -> None:
    child = pexpect.spawn(sys.executable, ["-c", LAUNCH, str(tiny_kb), "chat", "--host", f"sim:{healthy}",
                                           "--data-dir", str(data_dir)],
                          cwd=str(tmp_path), encoding="utf-8", timeout=WAIT_S, dimensions=(50, 220),
                          env={**_env(), "NO_COLOR": "1", "TERM": "dumb"})  # dumb: no spinner
    transcript: list[str] = []
    child.logfile_read = _Sink(transcript)
    child.expect("What happened\\?")
    child.expect("> ")
    child.send("\n".join(INCIDENT) + "\n")  # pasted: two lines, one Enter after the last
    child.expect("Environment")  # no empty line was needed
    child.expect("> ")
    child.sendline("")  # Enter alone skips it

    questions: list[str] = []
    answers = [STATEMENT, ""]  # the version statement, then nothing more: escalate
    marks: list[int] = []  # where in the transcript each feedback answer was sent
    while True:
        got = child.expect([APPROVAL, FEEDBACK, pexpect.EOF])
        if got == 0:
            questions.append(_flat(child.before + child.after))
            child.sendline("n")
        elif got == 1:
            marks.append(len("".join(transcript)))
            child.sendline(answers.pop(0) if answers else "")
        else:
            break
    child.close()
    raw = "".join(transcript)
    out = _flat(raw)
    assert child.exitstatus == 1, out[-3000:]

    # the incident's two pasted lines are one answer; the model and stage names are not hosts
    seen = re.search(r"seen in the text: (.*?) node-1:", out)
    assert seen and "gpu-node-07" in seen.group(1), out[:2000]
    assert "ZeRO-3" not in seen.group(1) and "llama3-70B" not in seen.group(1)

    # one question per step, listing each check with its cost and the hypothesis it tests
    assert questions and "[y/n]" not in out
    steps = [re.findall(r"(\S+): the read-only checks did not decide it", q)[-1] for q in questions]
    assert len(steps) == len(set(steps)), steps
    for question in questions:
        block = question.rsplit("the read-only checks did not decide it", 1)[-1]
        assert re.search(r" 1\. \w+ about \d+ s, tests \S+", block), block

    # the first walk's suggestions: the leaf left open only for want of a checkpoint directory is not first
    first = _flat(raw[:marks[0]]).rsplit("Things worth looking at:", 1)[-1]
    assert first.startswith(" 1. ") and not first.startswith(" 1. Unverified: OTHER.STORAGE.CHECKPOINT_CORRUPTED")

    # the answer re-ranks the taxonomy: the library it names comes first, and nothing judged before is reprinted
    after = _flat(raw[marks[0]:marks[1]])
    assert re.search(r"re-ranked: FRAMEWORK_LIBRARY [\d.]+,", after), after
    assert after.count("re-ranked: FRAMEWORK_LIBRARY") == 1, after  # the widened walk after it adds, not repeats
    verdict = r"[✘✔?] (?:rejected|confirmed|inconclusive) \S+"
    assert not set(re.findall(verdict, after)) & set(re.findall(verdict, _flat(raw[:marks[0]])))
    assert len(re.findall(r"▸ USER_APPLICATION\.CODE\.ILLEGAL_MEMORY_ACCESS(?! \(from history\))", out)) == 1

    # who acts, in words a chat user can act on
    assert "the provider can look further" in out and "goes to the provider" not in out
    assert "--approve-active" not in out
    tickets = sorted(tmp_path.glob("aidai-ticket-*.md"))
    assert len(tickets) == 1 and "--approve-active" not in tickets[0].read_text()
    assert STATEMENT in tickets[0].read_text()  # the customer's answer is in the ticket
    path = json.loads(tickets[0].with_suffix(".json").read_text())["path"]
    answered = next(i for i, step in enumerate(path) if step["action"] == "feedback")
    judged = [step["node"] for step in path[answered:] if step["action"] in ("confirmed", "rejected", "inconclusive")]
    assert judged[0] == "FRAMEWORK_LIBRARY.DEEPSPEED.BUG", judged[:5]  # the first hypothesis after the answer


def _flat(text: str) -> str:
    """The transcript as one line: the terminal is 80 columns wide (TERM=dumb), so long lines wrap."""
    return " ".join(ANSI.sub("", text).split())


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


class _Sink:
    """pexpect's logfile_read: keeps everything the chat printed."""

    def __init__(self, into: list[str]):
        self.into = into

    def write(self, data: str) -> None:
        self.into.append(data)

    def flush(self) -> None:
        pass
