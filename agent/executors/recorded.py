"""A recorded host (`bundle:FILE`: an aidai host bundle or an NVIDIA bug report): the real scripts run here against
what was recorded there (checklib_record's replay). Nothing is executed or read on this machine for the host: a
command the recording lacks is "not in the bundle", and the clock stands at the time it was recorded."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Any

from agent.collect.bundle import load
from agent.collect.recording import HostRecording
from agent.executors.base import ScriptRun
from agent.executors.local import LocalExecutor


class RecordedExecutor(LocalExecutor):
    def __init__(self, path: Path, recording: HostRecording | None = None):
        self.recording = recording or load(path)
        self.source = path
        self._dir = Path(tempfile.mkdtemp(prefix="aidai-replay-"))
        # removed with the executor even when no caller closes it (a server run, an interrupted command)
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True)
        replay = self._dir / "replay.json"
        replay.write_text(json.dumps(self.recording.replay()))
        env = {**self.recording.env, "AIDAI_REPLAY": str(replay), "HOSTNAME": self.recording.hostname,
               "PATH": str(self._dir / "no-tools")}  # nothing on PATH: a replay never runs this machine's tools
        super().__init__(name=self.recording.hostname, env=env, python=[sys.executable, "-S"])

    def run_script(self, script: Path, params: dict[str, Any], timeout: float) -> ScriptRun:
        if not self._dir.exists():
            return ScriptRun(error=f"the replay of {self.source} was closed")
        return super().run_script(script, params, timeout)

    def close(self) -> None:
        self._cleanup()
