"""Run scripts on a remote node over SSH (paramiko): verify the host key, upload over SFTP, run with a
timeout, clean up. The remote command line is built only from our own paths, quoted."""

from __future__ import annotations

import contextlib
import json
import shlex
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko

from agent.checks.manifest import LIB_SCRIPTS
from agent.executors.base import Executor, ScriptRun

if TYPE_CHECKING:
    from agent.slurm.jobs import SlurmJob


@dataclass
class SshTarget:
    user: str | None
    host: str
    port: int = 22
    key_file: str | None = None
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts
    trust_new_host_keys: bool = False  # trust on first use; a changed key is still refused
    remote_env: str | None = None  # a file on the node sourced before each script (e.g. a sim host's activate)
    connect_timeout: float = 10.0

    @property
    def name(self) -> str:
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port != 22 else ""
        return f"ssh://{user}{self.host}{port}"


class SshExecutor(Executor):
    def __init__(self, target: SshTarget):
        self.target = target
        self.name = target.name
        self.slurm_job: SlurmJob | None = None  # the job whose node this is (`--host slurm:JOBID`)
        self._client: paramiko.SSHClient | None = None
        self._remote_dir: str | None = None
        self._uploaded: set[str] = set()
        self._lock = threading.Lock()
        self._failure: str | None = None  # a connection failure is final for this run: don't retry per check

    # ---- connection ---------------------------------------------------------------------------
    def _connect(self) -> paramiko.SSHClient:
        if self._client is not None:
            return self._client
        if self._failure:
            raise ConnectionError(self._failure)
        t = self.target
        client = paramiko.SSHClient()
        known = Path(t.known_hosts).expanduser() if t.known_hosts else Path("~/.ssh/known_hosts").expanduser()
        if known.exists():
            client.load_host_keys(str(known))
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy() if t.trust_new_host_keys
                                           else paramiko.RejectPolicy())
        try:
            client.connect(t.host, port=t.port, username=t.user, key_filename=t.key_file,
                           timeout=t.connect_timeout, banner_timeout=t.connect_timeout,
                           auth_timeout=t.connect_timeout, allow_agent=True, look_for_keys=t.key_file is None)
        except paramiko.BadHostKeyException as exc:
            self._failure = (f"host key mismatch for {t.host}: got {exc.key.get_name()} "
                             f"{exc.key.get_fingerprint().hex()}, known_hosts has a different key; refusing to connect")
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc):
                self._failure = (f"{t.host} is not in {known}; add its key (ssh-keyscan) or pass "
                                 f"--trust-new-host-keys to trust it on first use")
            else:
                self._failure = f"ssh to {t.host}:{t.port} failed: {exc}"
        except (TimeoutError, OSError) as exc:
            self._failure = f"cannot reach {t.host}:{t.port}: {exc}"
        if self._failure:
            client.close()
            raise ConnectionError(self._failure)
        if t.trust_new_host_keys:
            known.parent.mkdir(parents=True, exist_ok=True)
            client.save_host_keys(str(known))
        self._client = client
        return client

    def _upload(self, client: paramiko.SSHClient, script: Path) -> str:
        if self._remote_dir is None:
            self._remote_dir = self._exec_simple(client, "mktemp -d /tmp/aidai-checks.XXXXXX").strip()
            if not self._remote_dir.startswith("/tmp/aidai-checks."):
                raise ConnectionError(f"could not create a temp dir on {self.target.host}")
        sftp = client.open_sftp()
        try:
            for path in (*(script.parent / lib for lib in LIB_SCRIPTS), script):
                if path.name not in self._uploaded:
                    sftp.put(str(path), f"{self._remote_dir}/{path.name}")
                    self._uploaded.add(path.name)
        finally:
            sftp.close()
        return self._remote_dir

    def _exec_simple(self, client: paramiko.SSHClient, command: str) -> str:
        _, stdout, _ = client.exec_command(command, timeout=self.target.connect_timeout)
        return stdout.read().decode(errors="replace")

    # ---- running ------------------------------------------------------------------------------
    def run_script(self, script: Path, params: dict[str, Any], timeout: float) -> ScriptRun:
        start = time.monotonic()
        try:
            with self._lock:
                client = self._connect()
                remote_dir = self._upload(client, script)
        except (ConnectionError, paramiko.SSHException, OSError) as exc:
            return ScriptRun(error=str(exc), duration_s=time.monotonic() - start)
        command = f"cd {shlex.quote(remote_dir)} && "
        if self.target.remote_env:
            command += f". {shlex.quote(self.target.remote_env)} && "
        # the remote `timeout` ends the script even if this side loses the connection
        command += f"exec timeout -k 5 {int(timeout)} python3 {shlex.quote(script.name)}"
        return self._run(client, command, json.dumps(params), timeout, start)

    def _run(self, client: paramiko.SSHClient, command: str, stdin: str, timeout: float, start: float) -> ScriptRun:
        try:
            transport = client.get_transport()
            if transport is None or not transport.is_active():
                raise paramiko.SSHException("connection closed")
            channel = transport.open_session(timeout=self.target.connect_timeout)
            channel.exec_command(command)
            channel.sendall(stdin.encode())
            channel.shutdown_write()
        except (paramiko.SSHException, OSError) as exc:
            return ScriptRun(error=f"ssh exec failed: {exc}", duration_s=time.monotonic() - start)
        out, err = bytearray(), bytearray()
        deadline = start + timeout + 10
        channel.settimeout(1.0)
        while not (channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready()):
            if time.monotonic() > deadline:
                channel.close()
                return ScriptRun(out.decode(errors="replace"), err.decode(errors="replace"), None,
                                 time.monotonic() - start, f"timed out after {timeout:.0f} s")
            try:
                if channel.recv_ready():
                    out += channel.recv(65536)
                elif channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                else:
                    time.sleep(0.02)
            except TimeoutError:
                continue
        rc = channel.recv_exit_status()
        channel.close()
        error = f"timed out after {timeout:.0f} s" if rc == 124 else ""
        return ScriptRun(out.decode(errors="replace"), err.decode(errors="replace"), rc,
                         time.monotonic() - start, error)

    def close(self) -> None:
        if self._client is not None:
            if self._remote_dir:
                with contextlib.suppress(paramiko.SSHException, OSError):
                    self._exec_simple(self._client, f"rm -rf {shlex.quote(self._remote_dir)}")
            self._client.close()
            self._client = None
