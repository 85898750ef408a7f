"""Version arithmetic the product shares with the check scripts: version keys and the known-bad version table
(verification_scripts/known_bad.yaml) as preflight and the simulator read it. One copy, in checklib.py (shipped to
every node with the scripts, so python3-stdlib only); here it is loaded from there."""

from __future__ import annotations

from typing import Any

from agent.paths import load_script

_lib = load_script("checklib")
vkey = _lib.vkey
pattern_matches = _lib.pattern_matches


def known_bad_entry(kind: str, version: str, table: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The known_bad.yaml entry that lists `version` under `kind`, honouring fixed_in; None if not listed."""
    if table is None:
        from agent.checks.manifest import load_known_bad

        table = load_known_bad()
    return _lib.known_bad_entry(table.get(kind), version)  # type: ignore[no-any-return]
