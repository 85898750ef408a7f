"""Training stages (L4 §5.3.2): predefined rules over canonical line shapes, and iteration markers.

The rules are the stage markers of Megatron-LM, DeepSpeed, torchrun, NCCL and the HF Trainer (research/logs.md §3);
a shape is classified once, so a rule costs nothing per line.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

STAGES = ("init", "loading", "training", "checkpointing", "teardown")
NONE = 0  # not a stage marker; stage k is index k+1 in the scanner's arrays

_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("teardown", re.compile(r"after training is done|exiting program|Sending process .* closing signal|"
                            r"Killing subprocess|sigkill_handler|ChildFailedError|Root Cause \(first observed",
                            re.I)),
    ("checkpointing", re.compile(r"saving checkpoint at iteration|"
                                 r"Saving model checkpoint|Checkpoint global_step.* is about to be saved|"
                                 r"Saving model checkpoint to", re.I)),
    # A completed save is back to training: a fault in the next iteration, before its marker line, is a training
    # failure, not a checkpointing one.
    ("training", re.compile(r"successfully saved checkpoint|"
                            r"^training \.\.\.|before the start of training step|Running training \*|"
                            r"\biteration <\*>/ ?<\*> \||\bstep=<\*>, skipped=|global_step=<\*>|"
                            r"\{'loss': <\*>", re.I)),
    ("loading", re.compile(r"building \w+ model|number of parameters on|loading (distributed )?checkpoint|"
                           r"successfully loaded checkpoint|Begin Load checkpoint|will not load any checkpoints|"
                           r"building train, validation|datasets target sizes|after dataloaders are built|"
                           r"after model, optimizer|done with setup", re.I)),
    ("init", re.compile(r"initializing torch distributed|NCCL INFO Bootstrap|Init START|Init COMPLETE|"
                        r"setting random seeds|init_distributed|Setting ds_accelerator|"
                        r"time to initialize megatron|after megatron is initialized|NCCL version", re.I)),
]

# The per-iteration line of each framework; the raw line gives the iteration number.
ITERATION_SHAPE = re.compile(r"\biteration <\*>/ ?<\*> \||\bstep=<\*>, skipped=|global_step=<\*>|"
                             r"\bstep <\*> \| loss", re.I)
_NUMBER_ALTERNATIVES = [rb"iteration\s+(\d+)\s*/", rb"global_step=(\d+)", rb"step=(\d+),", rb"\bstep (\d+) \| loss"]
ITERATION_NUMBER = re.compile(b"|".join(_NUMBER_ALTERNATIVES))


@lru_cache(maxsize=1 << 16)  # shapes repeat across the files of a job; classify each once per process
def stage_of(shape: str) -> int:
    """0 if the shape marks no stage, else 1 + index in STAGES."""
    for name, pattern in _RULES:
        if pattern.search(shape):
            return STAGES.index(name) + 1
    return NONE


@lru_cache(maxsize=1 << 16)
def is_iteration(shape: str) -> bool:
    return ITERATION_SHAPE.search(shape) is not None


def iteration_number(raw: bytes) -> int | None:
    match = ITERATION_NUMBER.search(raw)
    if not match:
        return None
    return int(next(g for g in match.groups() if g is not None))


def iteration_number_span(line: bytes) -> tuple[int, int]:
    """Byte span of the iteration number in a marker line, (-1, -1) if it has none. The same on the digit-folded
    line: the patterns' literals hold no digits, so folding digits changes no match."""
    match = ITERATION_NUMBER.search(line)
    if not match or match.lastindex is None:
        return -1, -1
    return match.span(match.lastindex)


def stage_at(transitions: list[tuple[int, int]], line: int) -> str:
    """The stage in effect at `line` of a file, from its (line, stage) transitions; before any marker: init."""
    current = "init"
    for pos, stage in transitions:
        if pos > line:
            break
        current = STAGES[stage - 1]
    return current


def failed_stage(stages: list[str]) -> str:
    """The stage most files were in at their first failure-indicating event; ties go to the later stage (a job
    that reached training on some ranks has passed init).

    Only files past init vote while there are any: Megatron and DeepSpeed log stage progress on rank 0 only, so
    the other ranks are "init" by default at any failure, which is silence, not evidence (a loading failure on a
    64-rank job was 63 votes for init against one for loading)."""
    if not stages:
        return "unknown"
    counts = Counter(s for s in stages if s != "init") or Counter(stages)
    return max(counts, key=lambda s: (counts[s], STAGES.index(s)))
