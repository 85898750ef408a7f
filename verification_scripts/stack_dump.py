#!/usr/bin/env python3
"""stack_dump: where are the training processes stuck?

Finds Python training processes (`ps -eo pid,ppid,args`, or params["pids"]), dumps each with
`py-spy dump --pid N` and classifies the hang:
  * DataLoader deadlock: the main thread waits on the worker queue while every worker is blocked;
  * rank 0 only work: rank 0 is busy outside any collective while the other ranks wait in one;
  * error-path hang: one rank is in exception teardown while the others wait in a collective.
Ranks come from /proc/PID/environ (RANK / LOCAL_RANK) or --local_rank arguments.
"""

import os
import re
import time

import checklib

COLLECTIVES = {"barrier", "all_reduce", "allreduce", "all_gather", "all_gather_into_tensor", "_all_gather_base",
               "all_gather_object", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "broadcast",
               "broadcast_object_list", "reduce", "gather", "gather_object", "scatter", "all_to_all",
               "all_to_all_single", "monitored_barrier", "send", "recv", "wait", "inference_all_reduce"}
COLLECTIVE_FILES = ("distributed", "deepspeed/comm", "c10d", "accelerate/utils/operations")
TEARDOWN = {"destroy_process_group", "_shutdown", "_abort", "abort", "excepthook", "print_exception", "print_exc",
            "format_exception", "format_exc", "print_tb", "_run_exitfuncs", "__del__", "_handle_exception"}
WEAK_TEARDOWN = re.compile(r"^__exit__$|teardown|cleanup|shutdown|finalize", re.I)
LAUNCHER_FILES = ("torch/distributed/elastic/agent", "torch/distributed/run.py", "deepspeed/launcher",
                  "accelerate/commands/launch")
TRAINING_ARGS = re.compile(r"(^|/)(python[\d.]*|torchrun|deepspeed|accelerate)(\s|$)")
NOT_TRAINING = re.compile(r"networkd-dispatcher|unattended-upgrade|cloud-init|landscape|py-spy|stack_dump\.py|"
                          r"checklib|supervisord|jupyter|ipykernel|aidai")


def parse_ps(text):
    """{pid: (ppid, args)} from `ps -eo pid,ppid,args`."""
    procs = {}
    for line in text.splitlines()[1:]:
        fields = line.split(None, 2)
        if len(fields) == 3 and fields[0].isdigit() and fields[1].isdigit():
            procs[int(fields[0])] = (int(fields[1]), fields[2])
    return procs


def parse_dump(text):
    """py-spy dump text -> {pid, cmdline, python, threads: [{id, status, name, frames: [(func, file, line)]}]}."""
    dump = {"pid": None, "cmdline": "", "python": "", "threads": []}
    thread = None
    for raw in text.splitlines():
        line = raw.rstrip()
        match = re.match(r"^Process (\d+): (.*)$", line)
        if match:
            dump["pid"], dump["cmdline"] = int(match.group(1)), match.group(2)
            continue
        match = re.match(r"^Python v(\S+)", line)
        if match:
            dump["python"] = match.group(1)
            continue
        match = re.match(r'^Thread (?:(0x[0-9A-Fa-f]+|\d+) )?\(([\w+]+)\)(?:: "(.*)")?', line)
        if match:
            thread = {"id": match.group(1), "status": match.group(2), "name": match.group(3) or "", "frames": []}
            dump["threads"].append(thread)
            continue
        # frames are indented 4 spaces; --locals adds deeper-indented "Arguments:" / "Locals:" blocks
        if thread is not None and line.startswith("    ") and not line.startswith("        ") and line.endswith(")"):
            cut = line.rfind(" (")
            if cut > 0:
                location = line[cut + 2:-1]
                file, _, lineno = location.rpartition(":")
                if not lineno.isdigit():
                    file, lineno = location, ""
                thread["frames"].append((line[:cut].strip(), file, lineno))
    return dump


def frame_text(frame):
    return "%s (%s%s)" % (frame[0], frame[1], ":" + frame[2] if frame[2] else "")


def is_collective(frame):
    func, file = frame[0], frame[1]
    if func.startswith("nccl") or "ProcessGroupNCCL" in func:
        return True
    return func in COLLECTIVES and any(key in file for key in COLLECTIVE_FILES)


def classify(thread):
    """(kind, the frame that decided it) for a process's main thread."""
    frames = thread["frames"]
    idle = thread["status"] == "idle"
    if any(any(key in f[1] for key in LAUNCHER_FILES) for f in frames):
        return "launcher", frames[0] if frames else None
    strong = next((f for f in frames if f[0] in TEARDOWN), None)
    if strong:
        return "teardown", strong
    collective = next((f for f in frames if is_collective(f)), None)
    if collective:
        return "collective", collective
    if any(f[0] == "_worker_loop" and "torch/utils/data" in f[1] for f in frames):
        return "worker", frames[0] if frames else None
    data = next((f for f in frames if "torch/utils/data/dataloader.py" in f[1]
                 and f[0] in ("_try_get_data", "_get_data", "_next_data", "__next__")), None)
    if data:
        return "dataloader", data
    weak = next((f for f in frames if WEAK_TEARDOWN.search(f[0])), None)
    if weak and idle:
        return "teardown", weak
    return ("idle" if idle else "busy"), frames[0] if frames else None


def process_rank(check, pid, args):
    environ = check.read("/proc/%d/environ" % pid) or ""
    env = dict(item.split("=", 1) for item in environ.split("\0") if "=" in item)
    for key in ("RANK", "LOCAL_RANK"):
        if env.get(key, "").isdigit():
            return int(env[key])
    match = re.search(r"--local[_-]rank[= ](\d+)", args)
    return int(match.group(1)) if match else None


def find_targets(check):
    """[(pid, ppid, args)] of candidate training processes, and all processes by pid."""
    cmd = check.run(["ps", "-eo", "pid,ppid,args"], timeout=20)
    if not cmd.ok:
        check.unknown("cannot list processes: %s" % cmd.why())
    procs = parse_ps(cmd.out)
    wanted = check.params.get("pids")
    if wanted:
        return [(int(p), procs.get(int(p), (0, ""))[0], procs.get(int(p), (0, "?"))[1]) for p in wanted], procs
    me = {os.getpid(), os.getppid()}
    targets = []
    for pid, (ppid, args) in sorted(procs.items()):
        if pid in me or NOT_TRAINING.search(args) or not TRAINING_ARGS.search(args.split(" -")[0] + " "):
            continue
        targets.append((pid, ppid, args))
    return targets, procs


def dump_once(check, pid):
    """(dump, None) or (None, why) for one py-spy run."""
    cmd = check.run(["py-spy", "dump", "--pid", str(pid)], timeout=60)
    if cmd.missing:
        return None, "missing"
    dump = parse_dump(cmd.out) if cmd.ok else None
    if dump is None or not dump["threads"]:
        return None, "denied" if re.search(r"[Pp]ermission", cmd.text) else cmd.why()
    return dump, None


def dump_all(check, targets):
    """Dump every target `samples` times; a process whose main stack never changed is `stable` (stuck)."""
    samples = max(1, int(check.params.get("samples", 2)))
    interval = float(check.params.get("sample_interval_s", 1.0))
    dumps, denied = [], []
    history = {}
    for round_no in range(samples):
        if round_no:
            time.sleep(interval)
        for pid, _ppid, _args in targets:
            if round_no and pid not in history:
                continue
            dump, why = dump_once(check, pid)
            if why == "missing":
                check.unknown("py-spy not found: install it (pip install py-spy) to dump %d Python processes"
                              % len(targets))
            if dump is None:
                history.pop(pid, None)
                if round_no == 0 and why == "denied":
                    denied.append(pid)
                elif round_no == 0:
                    check.info("dump_failed", "pid %d" % pid, "py-spy could not dump pid %d: %s" % (pid, why))
                continue
            history.setdefault(pid, []).append(dump)
    for pid, ppid, args in targets:
        if pid not in history:
            continue
        threads = [next((t for t in d["threads"] if t["name"] == "MainThread"), d["threads"][0])
                   for d in history[pid]]
        main = threads[-1]
        kind, frame = classify(main)
        stable = all(t["frames"][:8] == main["frames"][:8] for t in threads)
        dumps.append({"pid": pid, "ppid": ppid, "args": args, "rank": process_rank(check, pid, args),
                      "kind": kind, "frame": frame, "thread": main, "stable": stable})
    return dumps, denied


def who(p):
    return "rank %d (pid %d)" % (p["rank"], p["pid"]) if p["rank"] is not None else "pid %d" % p["pid"]


def gpus_busy(check):
    cmd = check.run(["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"], timeout=30)
    rows = checklib.parse_query_csv(cmd.out, ["index", "util"]) if cmd.ok else []
    return [r["index"] for r in rows if (checklib.to_int(r["util"]) or 0) >= 50]


def judge_dataloader(check, mains, workers):
    stuck = []
    for p in mains:
        own = workers.get(p["pid"], [])
        if not own:
            check.warn("dataloader_no_workers", who(p), "%s waits for DataLoader data (%s) but has no worker "
                       "processes (workers exited?)" % (who(p), frame_text(p["frame"])))
            continue
        if not p["stable"] or any(w["thread"]["status"] != "idle" or not w["stable"] for w in own):
            check.info("dataloader_slow", who(p), "%s waits for data; %d workers, some still active"
                       % (who(p), len(own)))
            continue
        stuck.append(p)
        blocked = sorted(set(frame_text(w["thread"]["frames"][0]) for w in own if w["thread"]["frames"]))
        busy = gpus_busy(check)
        message = ("DataLoader deadlock: %s waits on the worker queue (%s) while all %d workers are blocked in %s"
                   % (who(p), frame_text(p["frame"]), len(own), "; ".join(blocked[:3])))
        if busy:
            check.warn("dataloader_deadlock", who(p), message + " (but GPUs %s are busy)" % ",".join(busy))
        else:
            check.fail("dataloader_deadlock", who(p), message, frame_text(p["frame"]))
    return stuck


def judge_ranks(check, trainers):
    coll = [p for p in trainers if p["kind"] == "collective" and p["stable"]]
    others = [p for p in trainers if p["kind"] != "collective" and (p["stable"] or p["kind"] == "busy")]
    if not coll:
        return
    where = sorted(set(p["frame"][0] for p in coll))
    waiting = "%d rank(s) wait in %s" % (len(coll), "/".join(where))
    for p in others:
        if p["kind"] == "teardown":
            check.fail("error_path_hang", who(p), "%s is in exception teardown (%s) while %s: the failing rank never "
                       "left the process group" % (who(p), frame_text(p["frame"]), waiting), frame_text(p["frame"]))
        elif p["rank"] == 0 or (p["rank"] is None and len(others) == 1 and len(coll) > 1):
            check.fail("rank0_only_work", who(p), "%s is %s in non-collective code (%s) while %s: work done only on "
                       "rank 0 outlasts the collective timeout" % (who(p), "busy" if p["kind"] == "busy" else "idle",
                                                                   frame_text(p["frame"]), waiting),
                       frame_text(p["frame"]))
        else:
            check.warn("rank_outside_collective", who(p), "%s is in %s while %s" % (who(p), frame_text(p["frame"]),
                                                                                  waiting))
    if not others:
        ranks = [p["rank"] for p in coll]
        if 0 in ranks or None in ranks:
            check.info("all_in_collective", "host", "all %d local ranks wait in %s; the straggler is on another "
                       "host" % (len(coll), "/".join(where)))
        else:
            check.unknown("all %d local ranks (%s) wait in %s; rank 0 is not on this host: dump it where it runs"
                          % (len(coll), ",".join(str(r) for r in sorted(ranks)), "/".join(where)))


def body(check):
    targets, _procs = find_targets(check)
    check.metrics["python_processes"] = len(targets)
    if not targets:
        check.finish("no Python training process is running on this host: nothing to dump")
    dumps, denied = dump_all(check, targets)
    if denied and not dumps:
        check.unknown("py-spy was denied access to pids %s (needs root or CAP_SYS_PTRACE)" % denied)
    if not dumps:
        check.unknown("py-spy gave no usable stack for any of %d Python processes" % len(targets))
    for pid in denied:
        check.info("dump_denied", "pid %d" % pid, "py-spy was denied access to pid %d" % pid)
    kinds = {}
    for p in dumps:
        kinds[p["kind"]] = kinds.get(p["kind"], 0) + 1
        check.targets.append("pid %d" % p["pid"])
    check.metrics["kinds"] = kinds
    check.metrics["ranks"] = sorted(p["rank"] for p in dumps if p["rank"] is not None)
    workers = {}
    for p in dumps:
        if p["kind"] == "worker":
            workers.setdefault(p["ppid"], []).append(p)
    mains = [p for p in dumps if p["kind"] == "dataloader"]
    stuck = judge_dataloader(check, mains, workers)
    trainers = [p for p in dumps if p["kind"] not in ("launcher", "worker") and p not in stuck]
    judge_ranks(check, trainers)
    check.finish("%d Python processes dumped: no hang signature (%s)"
                 % (len(dumps), ", ".join("%s %d" % kv for kv in sorted(kinds.items()))))


if __name__ == "__main__":
    checklib.main("stack_dump", body)
