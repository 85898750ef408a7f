"""What the customer saw, in their words: an incident text's symptom classes (slow, hang, wrong results ...).

A vague report ("fine-tuning takes 24 h instead of 6", "allreduce returns NaN over IB") names no error line, no
Xid and no component, so signatures cannot point anywhere and embedding similarity to the causes' technical
descriptions is weak. What such a text does say is how the job failed, and each cause fails jobs in only a few
ways: a disabled NVLink makes a job slow, never makes a machine reboot. Each taxonomy leaf lists the classes it
produces (`symptoms` in taxonomy/taxonomy.json); the offline reasoner ranks a leaf higher when the incident shows
one of them. The phrases are the usual wordings of user reports and issue threads, not any one incident's.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

Symptom = Literal["slow", "hang", "wrong_results", "no_gpu", "reboot", "oom", "killed", "data_missing",
                  "cannot_connect", "crash"]
SYMPTOMS: tuple[str, ...] = get_args(Symptom)

_PHRASES: dict[str, list[str]] = {
    "slow": [
        r"\bslow(?:er|ly|ness|s|ing)?\b|\bslow-?down\b",
        r"\b(?:low|poor|degraded|reduced|drop(?:ped)?|bad|lower)\s+(?:in\s+)?(?:bandwidth|throughput|performance|"
        r"busbw|algbw|tflops|mfu|utili[sz]ation|speed|samples/s|tokens/s|it/s)",
        r"\b(?:bandwidth|throughput|performance|speed|utili[sz]ation)\s+(?:is\s+|was\s+)?(?:low|poor|degraded|"
        r"drops?|dropped|halved|much lower)",
        r"\b(?:takes?|taking|took)\s+(?:much\s+|far\s+|\d+x\s+)?longer\b",
        r"\b\d+\s*h(?:ours?)?\s*(?:->|→|instead of|rather than)\s*\d+",
        r"\bunderperform|\bbottleneck",
        r"\b\d+(?:\.\d+)?\s*x\s+slower\b|\bhalf\s+(?:the\s+)?(?:speed|bandwidth|throughput)",
    ],
    "hang": [
        r"\bhang(?:s|ing)?\b|\bhung\b|\bstuck\b|\bstall(?:s|ed|ing)?\b",
        r"\b(?:un|non-?)responsive\b|\b(?:stops?|stopped|is\s+not|isn'?t|not)\s+responding\b",
        r"\bfreez(?:e|es|ing)\b|\bfroze(?:n)?\b",
        r"\bdeadlock",
        r"\bno\s+(?:further\s+)?progress\b|\bnever\s+(?:finishes|returns|completes|starts)\b",
        r"\bwatchdog\s+caught\s+collective\s+operation\s+timeout",
        r"\b(?:call|operation|collective|request|job|step|rpc|barrier)\s+(?:\w+\s+){0,3}timed?\s*out\b",
    ],
    "wrong_results": [
        r"\bnan(?:s)?\b|\binf(?:inite)?\s+loss\b",
        r"\b(?:wrong|incorrect|inconsistent|corrupted?|garbage)\s+(?:results?|outputs?|values?|answers?|"
        r"gradients?|data)\b",
        r"\bsilent\s+data\s+corruption\b|\bsdc\b",
        r"\bloss\s+(?:diverges?|explodes?|spikes?|becomes\s+nan)",
        r"\bresults?\s+(?:differ|mismatch|are\s+wrong)",
    ],
    "no_gpu": [
        r"\bno\s+(?:cuda|gpus?|nvidia)(?:[- ](?:runtime|devices?|gpus?|drivers?))?\s+(?:is\s+|are\s+|was\s+|were\s+)?"
        r"(?:found|available|detected|visible)",
        r"\bno\s+devices\s+were\s+found\b",
        r"\bcuda(?:\.is_available\(\))?\s+(?:returns\s+|is\s+)?false\b|is_available\(\)\s*(?:->|returns|is|=+)\s*false",
        r"\b(?:can'?t|cannot|can\s+not|doesn'?t|does\s+not|don'?t|won'?t|will\s+not|unable\s+to|fails?\s+to)\s+"
        r"(?:see|find|detect|access|use)\s+(?:the\s+|any\s+|my\s+)?(?:gpus?|cuda|nvidia)",
        r"\b(?:gpus?|devices?)\s+(?:is\s+|are\s+)?(?:not\s+(?:found|detected|visible)|missing|disappear)",
        r"\b(?:gpu|device)\s+(?:becomes?|became|is|was)\s+(?:unusable|unavailable|inaccessible)",
        r"\bfailed\s+to\s+initiali[sz]e\s+nvml\b|\bcuda\s+(?:driver\s+)?initiali[sz]ation\s+(?:error|failed)",
        r"\bfound\s+no\s+nvidia\s+driver\b",
        # a GPU missing from the count: "lost 1 GPU", "came up short a GPU", "only 7 GPUs", "device_count() shows
        # only one"
        r"\b(?:lost|lose|losing|loses|missing|short)\s+(?:a|one|an?other|\d+)\s+(?:of\s+(?:the|its|my)\s+)?gpus?\b",
        r"\b(?:only|just)\s+(?:\d+|one|two|three|four|five|six|seven)\s+gpus?\b(?!\s+(?:per|each|node|machine))",
        r"\bdevice_count\(\)\s+(?:shows|returns|gives|is)\s+(?:only\s+)?(?:\d+|one|zero)\b",
        r"\b(?:fails?|failed|unable)\s+to\s+communicate\s+with\s+(?:the\s+)?(?:gpus?|devices?|driver)",
        r"\bfalls?\s+(?:off|out\s+of)\s+the\s+bus\b|\bunable\s+to\s+determine\s+the\s+device\s+handle\b",
        r"\bcould\s+not\s+select\s+device\s+driver\b",
        # the work runs, on the CPU: the GPU is there but nothing can use it
        r"\b(?:falls?|fell|falling)\s+back\s+to\s+(?:the\s+)?cpu\b|\b(?:runs?|running|ran)\s+(?:only\s+)?on\s+"
        r"(?:the\s+)?cpu\s+(?:instead|only)\b",
        r"\bno\s+(?:pre-?installed\s+|nvidia\s+|gpu\s+)?drivers?\s+(?:was\s+|is\s+)?(?:found|detected|loaded)\b",
        # the container runtime could not hand the GPUs to the container
        r"\bnvidia-container-cli:\s+(?:initiali[sz]ation|detection|mount|ldcache)\s+error\b",
        # the GPU operator's validators: its CUDA workload or driver check failed on the node (kubectl's STATUS
        # column, or the validator's own words)
        r"\bnvidia-(?:cuda|operator|driver)-validator\S*\s+\d+/\d+\s+(?:Init:)?(?:Error|CrashLoopBackOff)\b",
        r"\b(?:driver|cuda|toolkit)[- ]validation\s+(?:was\s+|is\s+)?(?:unable\s+to\s+pass|fail(?:s|ed|ing)?)\b",
    ],
    "reboot": [
        r"\breboot(?:s|ed|ing)?\b",
        r"\b(?:machine|system|server|node|workstation|computer|pc|host|box)\s+(?:suddenly\s+)?(?:restarts?|"
        r"restarted|shuts?\s+down|shut\s+off|turns?\s+off|powers?\s+(?:off|down)|powered\s+(?:off|down)|"
        r"goes\s+down|went\s+down|goes\s+dark|dies|died)",
        r"\bcrash(?:es|ed)?\s+the\s+(?:whole|entire)\s+(?:system|machine|server|node|computer)",
        r"\b(?:whole|entire)\s+(?:system|machine|server|node|computer)\s+(?:crash|freez|restart|reboot|goes\s+down)",
        r"\b(?:power|electrical)\s+(?:loss|outage|failure|cut|event|trip)",
    ],
    "oom": [
        r"\bout\s+of\s+memory\b|\boom\b|\bCUDA_ERROR_OUT_OF_MEMORY\b",
    ],
    "killed": [
        r"\bkilled\b|\bsigkill\b|\bpreempt(?:ed|ion)?\b|\bexit(?:ed)?\s+(?:with\s+)?(?:code|status)\s+137\b",
        r"\b(?:job|process|task|pod)\s+(?:was\s+)?(?:terminated|cancell?ed|evicted)\b",
    ],
    "data_missing": [
        r"\bno\s+such\s+file\b|\bfiles?\s+(?:not\s+found|(?:is\s+|are\s+|was\s+|were\s+)?(?:missing|deleted|gone))",
        r"\b(?:checkpoint|ckpt|dataset|shard|data)s?\s+(?:file\s+)?(?:is\s+|are\s+|was\s+|were\s+)?(?:corrupt(?:ed)?|"
        r"truncated|missing|deleted|unreadable|gone)",
        r"\bunexpected\s+(?:eof|end\s+of\s+file)\b|\bpurg(?:e|ed|ing)\b",
    ],
    "cannot_connect": [
        r"\bconnection\s+(?:refused|reset|closed)\b|\bno\s+route\s+to\s+host\b",
        r"\b(?:failed|unable)\s+to\s+(?:connect|establish|bootstrap|rendezvous)",
        r"\bunhandled\s+system\s+error\b",
        # NCCL's trace of a failed call returns ncclSystemError (2) up the stack; from its socket or bootstrap code
        # that is a connect/accept that failed (NVIDIA/nccl-tests #166: "socketStartConnect: Connect to ... failed",
        # then "misc/socket.cc:564 -> 2")
        r"\b(?:socket|bootstrap)\.cc:\d+\s+->\s+2\b",
    ],
    # the process died by itself (a signal, an abort, a core dump): not killed by someone, not a reboot
    "crash": [
        r"\bsegfault|\bsegmentation\s+fault|\bsig(?:segv|bus|abrt|ill)\b|\bbus\s+error\b|\bcore\s+dump(?:ed|s)?\b",
        r"\baborted\s+\(core|\bcrash(?:es|ed|ing)?\b",
        r"\b(?:process|job|training|program|worker|python|trainer|rank)\s+(?:\w+\s+){0,2}(?:died|dies)\b",
    ],
}
_PATTERNS: dict[str, list[re.Pattern[str]]] = {
    name: [re.compile(p, re.IGNORECASE) for p in phrases] for name, phrases in _PHRASES.items()}


def shown(text: str) -> dict[str, str]:
    """The symptom classes the text shows, each with the words that show it (first match)."""
    found: dict[str, str] = {}
    for name, patterns in _PATTERNS.items():
        for pattern in patterns:
            match = pattern.search(text)
            if match:
                found[name] = match.group(0)
                break
    return found
