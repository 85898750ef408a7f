"""Privacy-preserving environment signatures (Pharoah §5.2): keyed hashes of versions and configuration, so
two environments can be compared (same hash = same value) without anything customer-specific in clear.

HMAC-SHA256 with a salt the operator keeps: without the salt nobody can confirm a guessed version or host name
against a signature. Coarse components (GPU model, software stack) generalise across jobs; the full signature
pins one exact configuration.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from pydantic import BaseModel

from agent.preflight.collect import HostEnv

SALT_ENV = "AIDAI_SIGNATURE_SALT"
DIGEST_HEX = 16  # 64 bits: ample to tell configurations apart, short enough to read in a ticket
HARDWARE = ("gpu_model", "gpu_count")
SOFTWARE = ("driver", "cuda_runtime", "container_cuda", "torch", "nccl", "arch_list", "deepspeed", "accelerate",
            "ofed", "container_toolkit")
CONFIG = ("nccl_env",)


class Signature(BaseModel):
    host: str  # keyed hash of the host name
    components: dict[str, str]  # field -> keyed hash of its value ("" when the value is unknown)
    hardware: str
    software: str
    config: str
    full: str


def load_salt(path: Path | None = None) -> bytes:
    """The salt from $AIDAI_SIGNATURE_SALT, else a per-installation random salt kept in `path` (created once,
    mode 0600), so signatures from one installation compare with each other and with nobody else's."""
    if os.environ.get(SALT_ENV):
        return os.environ[SALT_ENV].encode()
    if path is None:
        from platformdirs import user_data_dir

        path = Path(user_data_dir("aidai")) / "signature.salt"
    if path.exists():
        return path.read_bytes().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    salt = secrets.token_hex(32).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(salt)
    return salt


def keyed(salt: bytes, field: str, value: object) -> str:
    if value in (None, "", [], {}):
        return ""
    text = json.dumps(value, sort_keys=True) if isinstance(value, list | dict) else str(value)
    return hmac.new(salt, f"{field}={text}".encode(), hashlib.sha256).hexdigest()[:DIGEST_HEX]


def sign(env: HostEnv, salt: bytes) -> Signature:
    fields = (*HARDWARE, *SOFTWARE, *CONFIG)
    components = {f: keyed(salt, f, env.field_value(f)) for f in fields}

    def group(names: tuple[str, ...]) -> str:
        return keyed(salt, "+".join(names), [components[n] for n in names])

    return Signature(host=keyed(salt, "host", env.host), components=components, hardware=group(HARDWARE),
                     software=group(SOFTWARE), config=group(CONFIG), full=group(fields))
