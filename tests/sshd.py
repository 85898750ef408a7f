"""A real OpenSSH server on 127.0.0.1 with throwaway keys, for the SSH executor tests."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.processes import stop

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclass
class Sshd:
    port: int
    user: str
    client_key: Path
    host_pub: str  # "ssh-ed25519 AAAA..."
    proc: subprocess.Popen[bytes]

    def known_hosts(self, path: Path, key_line: str | None = None) -> Path:
        path.write_text(f"[127.0.0.1]:{self.port} {key_line or self.host_pub}\n")
        return path

    def stop(self) -> None:
        stop(self.proc, grace_s=5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=30)


def start_sshd(root: Path, extra_config: tuple[str, ...] = ()) -> Sshd:
    """`extra_config`: more sshd_config lines (e.g. `MaxStartups 1024` for a benchmark's many connections)."""
    root.mkdir(parents=True, exist_ok=True)
    host_key, client_key = root / "host_ed25519", root / "client_ed25519"
    keygen(host_key)
    keygen(client_key)
    (root / "authorized_keys").write_text(client_key.with_suffix(".pub").read_text())
    os.chmod(root / "authorized_keys", 0o600)
    port = free_port()
    config = root / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}", f"PidFile {root / 'sshd.pid'}",
        f"AuthorizedKeysFile {root / 'authorized_keys'}", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PubkeyAuthentication yes", "PermitRootLogin prohibit-password",
        "StrictModes no", "UsePAM no", "Subsystem sftp internal-sftp", "LogLevel ERROR", *extra_config, "",
    ]))
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation dir sshd insists on
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL,
                            stderr=open(root / "sshd.log", "wb"))  # noqa: SIM115 - lives as long as sshd
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {(root / 'sshd.log').read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise RuntimeError("sshd did not start listening within 10 s")
    pub = host_key.with_suffix(".pub").read_text().split()
    return Sshd(port, getpass.getuser(), client_key, f"{pub[0]} {pub[1]}", proc)
