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

# NCCL's communicator start-up lines. NCCL creates a communicator whenever a process group first runs a collective
# (lazily, and for every new sub-group), so they also appear mid-run: after a file's training began they are not a
# return to init.
_COMMUNICATOR = r"NCCL INFO Bootstrap|Init START|Init COMPLETE|NCCL version"

_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("teardown", re.compile(r"after training is done|exiting program|Sending process .* closing signal|"
                            r"Killing subprocess|sigkill_handler|ChildFailedError|Root Cause \(first observed|"
                            r"Trainer\.fit` stopped|exits successfully", re.I)),
    ("checkpointing", re.compile(r"saving checkpoint at iteration|"
                                 r"Saving model checkpoint|Checkpoint global_step.* is about to be saved|"
                                 r"Saving model checkpoint to|saving model to .*\.ckpt", re.I)),
    # A completed save is back to training: a fault in the next iteration, before its marker line, is a training
    # failure, not a checkpointing one.
    ("training", re.compile(r"successfully saved checkpoint|is ready now!|"
                            r"^training \.\.\.|before the start of training step|Running training \*|"
                            r"\biteration <\*>/ ?<\*> \||\bstep=<\*>, skipped=|global_step=<\*>|"
                            r"\{'loss': <\*>", re.I)),
    ("loading", re.compile(r"building \w+ model|number of parameters on|loading (distributed )?checkpoint|"
                           r"successfully loaded checkpoint|Begin Load checkpoint|will not load any checkpoints|"
                           r"building train, validation|datasets target sizes|after dataloaders are built|"
                           r"after model, optimizer|done with setup|DeepSpeed info: version|"
                           r"Restoring states from the checkpoint|\| Name +\| Type|Trainable params", re.I)),
    ("init", re.compile(r"initializing torch distributed|setting random seeds|init_distributed|"
                        r"Setting ds_accelerator|time to initialize megatron|after megatron is initialized|"
                        r"Initializing distributed: GLOBAL_RANK|All distributed processes registered|"
                        r"WORLD INFO DICT|dist_world_size=|" + _COMMUNICATOR, re.I)),
]

COMMUNICATOR_INIT = re.compile(_COMMUNICATOR, re.I)

# A traceback through the checkpoint writer (torch.save and its zip writer, DeepSpeed's and the HF Trainer's save
# functions, a full disk): the error it ends in was raised while saving, whatever stage marker preceded it (a user
# script prints no "checkpoint saved" line to return to training by).
CHECKPOINT_WRITE = re.compile(r"\btorch\.save\(|, in _?save(?:_checkpoint)?$|write_record\(|"
                              r"PytorchStreamWriter failed|No space left on device|Disk quota exceeded")
TRACEBACK_SPAN = 40  # lines of a failure block read for a checkpoint write

# The per-iteration line of each framework; the raw line gives the iteration number.
ITERATION_SHAPE = re.compile(r"\biteration <\*>/ ?<\*> \||\bstep=<\*>, skipped=|global_step=<\*>|"
                             r"\bstep <\*>(?:/ ?<\*>)? \| loss", re.I)  # a user script's `step 12/40 | loss 0.69`
_NUMBER_ALTERNATIVES = [rb"iteration\s+(\d+)\s*/", rb"global_step=(\d+)", rb"step=(\d+),",
                        rb"\bstep (\d+)(?:/ ?\d+)? \| loss"]
ITERATION_NUMBER = re.compile(b"|".join(_NUMBER_ALTERNATIVES))


# Generic progress lines (a progress bar written to a file, a `step N loss X` print): progress wording, repeated at
# least PROGRESS_MIN_LINES times over at least PROGRESS_SPAN of the file's lines.
PROGRESS = re.compile(r"\b(?:step|steps|iter|iters|iteration|epoch|batch|loss|it/s|s/it|samples/s|tokens/s|"
                      r"samples per second|tflops)\b", re.I)
PROGRESS_MIN_LINES = 5
PROGRESS_SPAN = 0.25

# Wording that says something went wrong (error/exception/timeout/NCCL WARN/watchdog/Xid/segfault/OOM ...), and the
# wording of a reaction to a failure elsewhere (a launcher killing its workers, a collective timing out while it
# waits for a peer): a consequence, weak evidence of where the fault is.
FAILURE_WORDING = re.compile(
    r"error|exception|traceback|fail|fatal|time ?out|timed out|abort|NCCL WARN|watchdog|\bXid\b|segfault|"
    r"segmentation fault|core dumped|signal|out of memory|\bOOM\b|illegal|ECC|unhandled|terminate|refused|"
    r"connection closed|closed by|reset by peer|no such file|not found|assert|panic|link down|port error|"
    r"\bnan\b|corrupt|killed|unreachable|hang|stuck|what\(\)", re.I)
CONSEQUENCE = re.compile(
    r"killing subprocess|sigkill|sigterm|exit(?:s|ed)? with (?:return |exit )?code|exit ?code|exit status|"
    r"closing signal|ChildFailedError|Root Cause|ssh exited|Some NCCL operations have failed|"
    r"taking the entire process down|detected by watchdog|Process group watchdog|watchdog caught|"
    r"collective operation timeout|timed out|Timeout\(ms\)|^ *(?:host|rank|pid|time|"
    r"error_file|traceback) *:", re.I)


@lru_cache(maxsize=1 << 16)
def is_progress(shape: str) -> bool:
    return PROGRESS.search(shape) is not None


UNWORDED = 0.4  # failure_weight of an event that says nothing of a failure


@lru_cache(maxsize=1 << 16)
def failure_weight(template: str) -> float:
    """How much a failure-candidate event says about where the fault is: failure wording 1, a launcher's reaction
    to a failure 0.1, no wording (an event that only appears near the end) 0.4."""
    if CONSEQUENCE.search(template):
        return 0.1
    if FAILURE_WORDING.search(template):
        return 1.0
    return UNWORDED


@lru_cache(maxsize=1 << 16)  # shapes repeat across the files of a job; classify each once per process
def stage_of(shape: str) -> int:
    """0 if the shape marks no stage, else 1 + index in STAGES."""
    for name, pattern in _RULES:
        if pattern.search(shape):
            return STAGES.index(name) + 1
    return NONE


@lru_cache(maxsize=1 << 16)
def is_checkpoint_write(shape: str) -> bool:
    return CHECKPOINT_WRITE.search(shape) is not None


@lru_cache(maxsize=1 << 16)
def is_communicator_init(shape: str) -> bool:
    return COMMUNICATOR_INIT.search(shape) is not None


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
