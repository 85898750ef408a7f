#!/usr/bin/env python3
"""storage_purge: were the job's data files deleted by a purge policy?

Reads purge-policy logs (/var/log/*purge*.log, tmpreaper/tmpwatch/robinhood logs, and journal
lines of such tools), collects the paths they deleted and checks the data paths (params
data_paths; by default the directories named in those logs): a data path that is now missing or
empty while a purge deleted files under it FAILs.
"""

import os
import re

import checklib
import checklib_logs

MIN_WINDOW_S = 30 * 86400  # purges run long before the job trips over the missing file
LOG_NAME = re.compile(r"purge|tmpreaper|tmpwatch|robinhood|rbh|scratch.*clean|cleanup", re.I)
TOOL_IDENT = re.compile(r"purge|tmpreaper|tmpwatch|tmpfiles|robinhood|rbh|cleanup|scratch", re.I)
DELETED = re.compile(r"\b(?:removed|removing|deleted|deleting|purged|purging|unlink(?:ed|ing)?)\b\s*(?:file|dir"
                     r"(?:ectory)?)?\s*:?\s*['\"]?(/[^\s'\",;)]+)", re.I)
SYSLOG_IDENT = re.compile(r"^\S+ \S+ ([\w.@/-]+?)(?:\[\d+\])?: ")


def purge_lines(check, since):
    """[(epoch or None, source, text)] of purge-tool log lines; and the sources found."""
    out, sources = [], []
    for name in check.listdir("/var/log"):
        if LOG_NAME.search(name) and (name.endswith(".log") or "." not in name):
            text = check.read("/var/log/" + name)
            if text is None:
                continue
            sources.append("/var/log/" + name)
            for line in text.splitlines():
                out.append((checklib_logs.iso_epoch(line), "/var/log/" + name, line))
    cmd = check.run(["journalctl", "--no-pager", "-o", "short-iso", "--since", checklib_logs.stamp(since)], timeout=90)
    if checklib_logs.journal_readable(cmd):
        tools = set()
        for line in cmd.out.splitlines():
            ident = SYSLOG_IDENT.match(line)
            if ident and TOOL_IDENT.search(ident.group(1)):
                tools.add(ident.group(1))
                out.append((checklib_logs.iso_epoch(line), ident.group(1), line))
        sources.extend("journal:%s" % t for t in sorted(tools))
    return out, sources


def vanished_root(check, path):
    """The topmost missing ancestor of a deleted path, or None when its parent still exists."""
    gone = path
    parent = os.path.dirname(path)
    while parent not in ("", "/") and not check.exists(parent):
        gone, parent = parent, os.path.dirname(parent)
    return gone if gone != path else None


def body(check):
    since, until = check.window(MIN_WINDOW_S, MIN_WINDOW_S)
    lines, sources = purge_lines(check, since)
    check.metrics["purge_logs"] = sources
    deleted = {}
    for epoch, source, text in lines:
        if epoch is not None and not since <= epoch <= until:
            continue
        for match in DELETED.finditer(text):
            deleted[match.group(1).rstrip("/")] = (source, text)
    check.metrics["deleted_paths"] = len(deleted)
    data_paths = [p.rstrip("/") or "/" for p in (check.params.get("data_paths") or [])]
    affected = {}
    for path, origin in deleted.items():
        root = vanished_root(check, path)
        if root is None:
            parent = os.path.dirname(path)
            root = parent if not check.listdir(parent) else None
            key = root or parent
            affected.setdefault(key, {"gone": root is not None, "files": [], "origin": origin})
        else:
            affected.setdefault(root, {"gone": True, "files": [], "origin": origin})
        affected[root or os.path.dirname(path)]["files"].append(path)
    for path in data_paths:
        if path in affected or any(p.startswith(path + "/") for p in affected):
            continue
        if not check.exists(path) or not check.listdir(path):
            check.warn("data_missing", path, "data path %s is %s, but no purge-policy log names it"
                       % (path, "missing" if not check.exists(path) else "empty"))
    for root, info in sorted(affected.items()):
        if data_paths and not any(root == p or root.startswith(p + "/") or p.startswith(root + "/")
                                  for p in data_paths):
            continue
        source, text = info["origin"]
        if info["gone"]:
            state = "missing" if not check.exists(root) else "empty"
            check.fail("files_purged", root, "%s is %s: a purge policy deleted %d file(s) under it (%s), e.g. %s"
                       % (root, state, len(info["files"]), source, info["files"][0]), text.strip())
        else:
            check.warn("files_purged", root, "a purge policy deleted %d file(s) in %s (%s); the directory still has "
                       "other files" % (len(info["files"]), root, source), text.strip())
    if not sources and not data_paths:
        check.unknown("no purge-policy logs on this host and no data_paths given to check", needs="data_paths")
    check.finish("no data path affected by purge-policy deletions in the %d days before the incident"
                 % ((until - since - checklib.AFTER_INCIDENT_S) // 86400))


if __name__ == "__main__":
    checklib.main("storage_purge", body)
