#!/usr/bin/env python3
"""scheduler_events: was the job killed by the scheduler, a policy/cleanup tool or the OOM killer?

Reads the journal (`journalctl --since`, else /var/log/syslog) and slurmd log files for the window
(params window_s, at least 24 h) and reports, per job or process, what killed it and why:
a policy/cleanup/reaper tool, a Slurm cancellation (time limit, preemption, node failure, manual),
a cgroup memory limit, the kernel OOM killer or a kubelet eviction.
"""

import re
import time

import checklib
import checklib_logs

DEFAULT_WINDOW_S = 86400  # also the floor: users report a killed job hours after it died
SLURM_LOGS = ["/var/log/slurm/slurmd.log", "/var/log/slurmd.log", "/var/log/slurm-llnl/slurmd.log"]
KILL_VERB = re.compile(r"\b(kill(ed|ing|s)?|terminat\w*|cancel\w*|reap\w*|purg\w* (job|process))\b", re.I)
KILL_OBJECT = re.compile(r"\b(jobs?|process(es)?|pids?|tasks?|steps?)\b", re.I)
POLICY_WORD = re.compile(r"\b(polic\w*|violat\w*|idle|limits?|quota|cleanup|clean-up|reaper|exceed\w*|abuse|"
                         r"orphan\w*|stray|unauthori[sz]ed|not allowed)\b", re.I)
POLICY_IDENTS = re.compile(r"arbiter|reaper|killjob|cleanup|policy|watchdog|pam_slurm_adopt|job-?killer", re.I)
SLURM_CANCEL = re.compile(r"\*\*\* (JOB|STEP) ([\d.]+) ON (\S+) CANCELLED AT (\S+)(?: DUE TO ([A-Z ]+?))? \*\*\*")
MEMORY_LIMIT = re.compile(r"Exceeded (job|step) memory limit|Detected \d+ oom[-_ ]kill event|oom[-_]kill event",
                          re.I)
OOM_KILL = re.compile(r"(Memory cgroup out of memory|Out of memory): Killed process (\d+) \(([^)]+)\)")
EVICTION = re.compile(r"\bEvicted\b|evict\w* pod|The node was low on resource|preempt\w* pod", re.I)
JOB_ID = re.compile(r"\bJOB (\d+)|\[(\d+)\.(?:batch|extern|\d+)\]|\b[Jj]ob[ _]?(?:id)?[ =:#]*(\d{2,})\b|"
                    r"StepId=(\d+)")
SYSLOG_IDENT = re.compile(r"^\S+ \S+ ([\w.@/-]+?)(?:\[\d+\])?: ")


def journal_lines(check, since, until):
    """([(epoch or None, ident, text)], sources, why) from journalctl or syslog, plus slurmd log files."""
    out, sources = [], []
    cmd = check.run(["journalctl", "--no-pager", "-o", "short-iso", "--since", checklib_logs.stamp(since),
                     "--until", checklib_logs.stamp(until)],
                    timeout=90)
    journal = []
    if checklib_logs.journal_readable(cmd):
        for line in cmd.out.splitlines():
            ident = SYSLOG_IDENT.match(line)
            journal.append((checklib_logs.iso_epoch(line), ident.group(1) if ident else "", line))
    # lines without short-iso timestamps are not a journal we can read (and "-- No entries --" is empty)
    if any(epoch is not None for epoch, _i, _t in journal) or (checklib_logs.journal_readable(cmd)
                                                                and "No entries" in cmd.out):
        sources.append("journalctl")
        out.extend(journal)
    else:
        for path in ("/var/log/syslog", "/var/log/messages"):
            text = check.read(path)
            if text is None:
                continue
            sources.append(path)
            for line in text.splitlines():
                fields = line.split(None, 5)
                ident = re.sub(r"\[\d+\]:?$", "", fields[4]) if len(fields) > 4 else ""
                out.append((None, ident.rstrip(":"), line))
            break
    for path in SLURM_LOGS:
        text = check.read(path)
        if text is None:
            continue
        sources.append(path)
        for line in text.splitlines():
            match = re.match(r"^\[(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})", line)
            epoch = time.mktime(time.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S")) if match else None
            if epoch is None or epoch >= since:
                out.append((epoch, "slurmd", line))
    return out, sources, checklib_logs.journal_why(cmd)


def job_of(text):
    match = JOB_ID.search(text)
    if not match:
        return None
    return next(g for g in match.groups() if g)


def classify(ident, text):
    """(kind, severity, reason) or None."""
    match = SLURM_CANCEL.search(text)
    if match:
        reason = (match.group(5) or "").strip()
        kinds = {"TIME LIMIT": "time_limit", "PREEMPTION": "preemption", "NODE FAILURE": "node_failure"}
        if reason in kinds:
            return kinds[reason], "FAIL", "Slurm cancelled the job due to %s" % reason.lower()
        return "cancelled", "WARN", "Slurm cancelled the job (by a user, an admin or a tool; no reason logged)"
    if MEMORY_LIMIT.search(text):
        return "memory_limit", "FAIL", "the job exceeded its cgroup memory limit"
    match = OOM_KILL.search(text)
    if match:
        return "oom_killer", "FAIL", "the kernel OOM killer killed %s (pid %s)" % (match.group(3), match.group(2))
    if ident.startswith("kubelet") and EVICTION.search(text):
        return "eviction", "FAIL", "kubelet evicted the pod"
    if KILL_VERB.search(text) and KILL_OBJECT.search(text) and (POLICY_WORD.search(text) or POLICY_IDENTS.search(
            ident)):
        said = text.split(": ", 1)[1] if SYSLOG_IDENT.match(text) else text
        return "policy_kill", "FAIL", "killed by %s: %s" % (ident or "a policy tool", said.strip()[:200])
    return None


def body(check):
    since, until = check.window(DEFAULT_WINDOW_S, DEFAULT_WINDOW_S)
    lines, sources, why = journal_lines(check, since, until)
    if not sources:
        check.unknown("no readable journal, syslog or slurmd log (%s)" % why)
    check.metrics["log_sources"] = sources
    check.metrics["lines"] = len(lines)
    seen = {}
    for epoch, ident, text in lines:
        if epoch is not None and not since <= epoch <= until:
            continue
        found = classify(ident, text)
        if found is None:
            continue
        kind, severity, reason = found
        job = job_of(text)
        seen[(kind, job or ident)] = (severity, job, ident, reason, text)
    for (kind, _key), (severity, job, ident, reason, text) in sorted(seen.items()):
        entity = "job %s" % job if job else (ident or "host")
        check.finding(kind, severity, entity, "%s: %s" % (entity, reason), text.strip())
    check.metrics["kills"] = len([v for v in seen.values() if v[0] == "FAIL"])
    check.finish("no job killed by a scheduler, policy tool or OOM killer in the %d h before the incident"
                 % ((until - since - checklib.AFTER_INCIDENT_S) // 3600))


if __name__ == "__main__":
    checklib.main("scheduler_events", body)
