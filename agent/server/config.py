"""What `aidai serve` is configured with: where it listens, who may call it, which hosts it may check.

Tokens: a file (`--tokens FILE` or env AIDAI_TOKENS_FILE) with one `NAME ROLE TOKEN` per line (`#` comments),
or env AIDAI_TOKENS=`NAME:ROLE:TOKEN,...`. Roles: viewer (read runs and tickets, start runs that never run
active checks, answer questions) and operator (also approves active checks). With no token configured the
server only starts on a loopback address, and every local caller is the operator `local`.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Role = Literal["viewer", "operator"]
ROLES: tuple[Role, ...] = ("viewer", "operator")
MIN_TOKEN_CHARS = 16


class ConfigError(ValueError):
    """The server cannot start as configured (shown as one line, exit code 2)."""


@dataclass(frozen=True)
class Caller:
    name: str
    role: Role

    @property
    def operator(self) -> bool:
        return self.role == "operator"


@dataclass
class ServerConfig:
    data_dir: str | None = None  # runs, checkpoints, uploads, the incident DB (default: the per-user data dir)
    targets: list[str] = field(default_factory=lambda: ["local"])  # host specs a run may name, nothing else
    tokens: dict[str, Caller] = field(default_factory=dict)  # token -> caller
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 4  # diagnoses running at once; more wait queued
    max_upload_bytes: int = 16 * 2**20  # a request body larger than this is refused (413)
    base_url: str | None = None  # for runs with llm=openai
    model: str | None = None
    kb_dir: str | None = None
    chroma_url: str | None = None
    checkpoint_url: str | None = None  # Postgres for the runs' checkpoints (default: SQLite in the data dir)
    history: bool = True  # pipeline 1 (similar past incidents; loads the embedding model on the first run)
    prometheus: str | None = None  # the fleet's Prometheus, read by every run's pre-triage (unless it says no)

    def check(self) -> None:
        if not self.tokens and not is_loopback(self.host):
            raise ConfigError(f"binding {self.host} needs bearer tokens: pass --tokens FILE (lines `NAME ROLE "
                              "TOKEN`) or set AIDAI_TOKENS; without tokens, bind 127.0.0.1")
        if not self.targets:
            raise ConfigError("no host to check: pass --target SPEC at least once")
        if self.workers < 1:
            raise ConfigError("--workers must be at least 1")
        if self.max_upload_bytes < 1024:
            raise ConfigError("--max-upload-mb is too small")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_token_line(line: str, where: str) -> tuple[str, Caller] | None:
    line = line.split("#", 1)[0].strip()
    if not line:
        return None
    parts = line.split()
    if len(parts) != 3:
        raise ConfigError(f"{where}: expected `NAME ROLE TOKEN`, got {len(parts)} field(s)")
    name, role, token = parts
    if role not in ROLES:
        raise ConfigError(f"{where}: role {role!r} is not one of {', '.join(ROLES)}")
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"{where}: the token of {name} is shorter than {MIN_TOKEN_CHARS} characters")
    return token, Caller(name=name, role=role)  # type: ignore[arg-type]


def load_tokens(file: str | Path | None = None, env: dict[str, str] | None = None) -> dict[str, Caller]:
    """Tokens from FILE (or AIDAI_TOKENS_FILE) and AIDAI_TOKENS; a token given twice is an error."""
    env = dict(os.environ) if env is None else env
    entries: list[tuple[str, Caller]] = []
    path = file or env.get("AIDAI_TOKENS_FILE")
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"tokens file {path}: {exc.strerror or exc}") from None
        for number, line in enumerate(text.splitlines(), 1):
            if (entry := parse_token_line(line, f"{path}:{number}")) is not None:
                entries.append(entry)
    for index, item in enumerate(env.get("AIDAI_TOKENS", "").split(","), 1):
        if item.strip() and (entry := parse_token_line(item.replace(":", " "), f"AIDAI_TOKENS item {index}")):
            entries.append(entry)
    tokens: dict[str, Caller] = {}
    for token, caller in entries:
        if token in tokens:
            raise ConfigError(f"the same token is configured twice ({tokens[token].name}, {caller.name})")
        tokens[token] = caller
    return tokens
