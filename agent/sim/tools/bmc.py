"""The BMC of a simulated host through in-band IPMI: `ipmitool sel elist|list|info` from HostState.sel.

Event times are relative to "now" and printed as the BMC does (MM/DD/YYYY | HH:MM:SS, local time);
without /dev/ipmi0 ipmitool fails the way it does on hosts without the IPMI driver.
"""

from __future__ import annotations

import time

from agent.sim.state import HostState
from agent.sim.tools import ToolOutput, usage_error

COMMANDS = ("ipmitool",)
NO_DEVICE = ("Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0: No such file or directory\n")


def _elist(host: HostState, numeric: bool) -> ToolOutput:
    events = sorted(host.sel, key=lambda e: -e.age_s)
    if not events:
        return ToolOutput("SEL has no entries\n")
    now = time.time()
    lines = []
    for record, event in enumerate(events, 1):
        stamp = time.localtime(now - event.age_s)
        lines.append(f"{record:>4x} | {time.strftime('%m/%d/%Y', stamp)} | {time.strftime('%H:%M:%S', stamp)} | "
                     f"{event.sensor if not numeric else event.sensor.split()[0] + ' #0x%02x' % (0x30 + record)} | "
                     f"{event.event} | {event.direction}")
    return ToolOutput("\n".join(lines) + "\n")


def _info(host: HostState) -> ToolOutput:
    count = len(host.sel)
    return ToolOutput(f"SEL Information\nVersion          : 1.5 (v1.5, v2 compliant)\nEntries          : {count}\n"
                      f"Free Space       : {65536 - 16 * count} bytes\nPercent Used     : {max(count // 40, 0)}%\n")


def run(host: HostState, argv: list[str]) -> ToolOutput:
    args = [a for a in argv[1:] if a not in ("-I", "open")]
    if not host.software.bmc_device:
        return ToolOutput("", NO_DEVICE, 1)
    if args[:2] == ["sel", "elist"]:
        return _elist(host, numeric=False)
    if args[:2] == ["sel", "list"]:
        return _elist(host, numeric=True)
    if args[:2] == ["sel", "info"]:
        return _info(host)
    return usage_error("ipmitool", argv)


def installed(host: HostState, command: str) -> bool:
    return command not in host.software.missing_tools


def files(host: HostState) -> dict[str, str | None]:
    return {"/dev/ipmi0": None} if host.software.bmc_device else {}
