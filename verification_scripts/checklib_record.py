"""Recording what a check saw on its host, and replaying it elsewhere. Shipped with checklib.py; python3 stdlib only
(Python >= 3.8).

AIDAI_RECORD=DIR: every command a check runs (argv, exit code, stdout, stderr, missing / timed out), every file it
reads, every path it tests or lists and every tool it looks up is appended to DIR/<check>.<pid>.jsonl. The collector
(agent/collect) gathers these into a host bundle.

AIDAI_REPLAY=FILE: the check runs against such a recording (agent/collect/bundle.py writes FILE) instead of the host:
nothing is executed or read here. A command the recording does not hold is a tool that is "not in the bundle" (the
check says so, never judges it), a file it does not hold is absent, and the clock stands at the time of the recording,
so log lines are judged as they were when collected.
"""

import json
import os
import re
import time

# what differs between two runs of the same check without saying anything about the host: the private temp dir a
# probe script is written to, and the journal window computed from the clock (the replay filters lines itself)
_PROBE_RE = re.compile(r"aidai-probe-[^/\s]+")
_TIME_OPTIONS = ("--since", "--until")


def key(argv):
    """The form of a command line under which it is recorded and looked up."""
    out, skip = [], False
    for arg in argv:
        out.append("*" if skip else _PROBE_RE.sub("aidai-probe-*", arg))
        skip = arg in _TIME_OPTIONS
    return json.dumps(out)


class Recorder(object):
    def __init__(self, directory):
        self.directory = directory
        self.path = None

    def start(self, check_name):
        self.path = os.path.join(self.directory, "%s.%d.jsonl" % (check_name, os.getpid()))

    def add(self, entry):
        if self.path is None:
            self.start("unnamed")
        with open(self.path, "a") as handle:
            handle.write(json.dumps(entry) + "\n")


class Replay(object):
    """A host's recording, as agent/collect/bundle.py writes it for one replay."""

    def __init__(self, path):
        with open(path) as handle:
            data = json.load(handle)
        self.runs = data.get("runs") or {}
        self.files = data.get("files") or {}
        self.exists = data.get("exists") or {}
        self.listdirs = data.get("listdir") or {}
        self.which = data.get("which") or {}
        self.euid = data.get("euid")
        self.at = float(data.get("collected_at") or time.time())
        self.unrecorded = []

    def missing(self, what):
        if what not in self.unrecorded:
            self.unrecorded.append(what)

    def run(self, argv):
        """The recorded outcome {rc, stdout, stderr, missing, timed_out, seconds} or None."""
        entry = self.runs.get(key(argv))
        if entry is None:
            self.missing(" ".join(argv))
        return entry

    def read(self, path):
        if path not in self.files:
            self.missing(path)
            return None
        return self.files[path]

    def path_exists(self, path):
        if path in self.exists:
            return self.exists[path]
        if self.files.get(path) is not None or path in self.listdirs:
            return True
        parent, name = os.path.split(path.rstrip("/"))
        if parent in self.listdirs:
            return name in self.listdirs[parent]
        self.missing(path)
        return False

    def listdir(self, path):
        if path not in self.listdirs:
            self.missing(path)
            return []
        return list(self.listdirs[path])

    def tool(self, name):
        if name not in self.which:
            self.missing("which " + name)
            return None
        return self.which[name]


def _from_env():
    replay = os.environ.get("AIDAI_REPLAY")
    record = os.environ.get("AIDAI_RECORD")
    return (Replay(replay) if replay else None), (Recorder(record) if record and not replay else None)


REPLAY, RECORDER = _from_env()
if REPLAY is not None:
    # the host's clock as it was when recorded: "the last two hours" of its logs are the two hours before that
    time.time = lambda: REPLAY.at
