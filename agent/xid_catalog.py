"""NVIDIA's Xid / NVSwitch SXid catalogue for the reasoners: the same CSV files xid_scan reads on the host
(verification_scripts/xid_catalog.csv, sxid_catalog.csv; sources in verification_scripts/XID_SOURCES.md)."""

from __future__ import annotations

import csv
from functools import cache
from typing import Literal

from pydantic import BaseModel

from agent.paths import SCRIPTS_DIR


class XidEntry(BaseModel):
    kind: Literal["XID", "SXID"]
    code: int
    mnemonic: str
    name: str
    applies_to: str = ""
    immediate: str = ""  # NVIDIA's resolution bucket, verbatim (RESET_GPU, WORKFLOW_XID_48 ...)
    investigatory: str = ""
    action: str = ""  # ours, normalised: none | restart_app | update_sw_fw | reset_gpu | reboot | ... ('' = unused)
    app_induced: bool = False
    leaf: str = ""  # the taxonomy leaf, or the nearest sub-category
    severity: str = ""
    source: str = ""

    def brief(self) -> str:
        label = "Xid" if self.kind == "XID" else "SXid"
        what = f"{label} {self.code} {self.name}"
        if not self.action:
            return f"{what}: unused in NVIDIA's catalogue"
        where = f" -> {self.leaf}" if self.leaf else ""
        app = ", usually application-induced" if self.app_induced else ""
        return f"{what}: NVIDIA {self.immediate or self.action}{app}{where}"


@cache
def catalog() -> dict[tuple[str, int], XidEntry]:
    entries: dict[tuple[str, int], XidEntry] = {}
    for name in ("xid_catalog.csv", "sxid_catalog.csv"):
        with (SCRIPTS_DIR / name).open(newline="") as handle:
            for row in csv.DictReader(handle):
                entry = XidEntry(**{**row, "app_induced": row["app_induced"] == "yes"})
                entries[(entry.kind, entry.code)] = entry
    return entries


def xid(code: int) -> XidEntry | None:
    return catalog().get(("XID", code))


def places(codes: list[int]) -> set[str]:
    """The taxonomy nodes the catalogue puts these Xids on (leaves or sub-categories)."""
    return {entry.leaf for code in codes if (entry := xid(code)) is not None and entry.leaf}
