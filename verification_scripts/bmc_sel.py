#!/usr/bin/env python3
"""bmc_sel: critical events in the BMC System Event Log (`ipmitool sel elist`).

Finding ids carry the kind of event:
  psu               a power supply failed, lost its input or is predicted to fail (less power capacity)
  power_loss        the node lost power or was powered off unexpectedly (site/feed power loss)
  thermal_shutdown  a temperature crossed its critical threshold and the node shut down (or a CPU thermal trip)
  thermal_critical  a critical temperature without a shutdown (WARN)
  board_critical    processor, memory, bus or firmware critical events on the mainboard
Only events inside the window (params window_s, default 7 days, at least 24 h) FAIL; older ones are INFO.
"""

import re
import time

import checklib

DEFAULT_WINDOW_S = 7 * 86400
MIN_WINDOW_S = 86400  # BMC events are rare and a node is often checked hours after it came back
PSU_EVENTS = re.compile(r"failure detected|predictive failure|ac lost|input lost|out-of-range|config(uration)? error|"
                        r"power supply inactive|redundancy lost", re.I)
POWER_LOSS = re.compile(r"^(ac lost|power off/down|power cycle|g3/mechanical off|soft-power control failure)", re.I)
SHUTDOWN = re.compile(r"soft-off|power off/down|g3/mechanical off|ac lost", re.I)
TEMP_CRITICAL = re.compile(r"upper (critical|non-recoverable) going high", re.I)
BOARD_CRITICAL = [
    (re.compile(r"^Processor", re.I), re.compile(r"ierr|machine check|uncorrectable|configuration error|"
                                                 r"frb\d? ?/?bist failure", re.I)),
    (re.compile(r"^Memory", re.I), re.compile(r"uncorrectable ecc|parity|memory device disabled|"
                                              r"critical overtemperature", re.I)),
    (re.compile(r"^Critical Interrupt", re.I), re.compile(r"serr|perr|bus uncorrectable|bus fatal|nmi", re.I)),
    (re.compile(r"^System Firmware", re.I), re.compile(r"error", re.I)),
    (re.compile(r"^(Mainboard|System Board|Chassis|Module / Board)", re.I), re.compile(r"critical|fault|fail", re.I)),
]


def parse_elist(text):
    """[(epoch or None, sensor, event, direction, raw)] from `ipmitool sel elist`."""
    events = []
    for raw in text.splitlines():
        fields = [f.strip() for f in raw.split("|")]
        if len(fields) < 6 or not re.match(r"^[0-9a-fA-F]+$", fields[0]):
            continue
        date, clock = fields[1], fields[2]
        epoch = None
        for fmt in ("%m/%d/%Y %H:%M:%S", "%m/%d/%y %H:%M:%S"):
            try:
                epoch = time.mktime(time.strptime("%s %s" % (date, clock), fmt))
                break
            except ValueError:
                continue
        events.append((epoch, fields[3], fields[4], fields[5], raw.strip()))
    return events


def classify(sensor, event, direction):
    """Kind of a SEL event, or None when it is benign."""
    asserted = direction.lower().startswith("asserted")
    if sensor.lower().startswith("power supply"):
        if "presence detected" in event.lower():
            return None if asserted else "psu"
        return "psu" if asserted and PSU_EVENTS.search(event) else None
    if not asserted:
        return None
    if sensor.lower().startswith(("power unit", "system acpi power state")) and POWER_LOSS.search(event):
        return "power_loss"
    if sensor.lower().startswith("power unit") and re.search(r"redundancy lost", event, re.I):
        return "psu"
    if sensor.lower().startswith("temperature") and TEMP_CRITICAL.search(event):
        return "thermal_critical"
    if sensor.lower().startswith("processor") and re.search(r"thermal trip", event, re.I):
        return "thermal_shutdown"
    for sensor_re, event_re in BOARD_CRITICAL:
        if sensor_re.search(sensor) and event_re.search(event):
            return "board_critical"
    return None


MESSAGES = {
    "psu": "power supply event: %s %s (less power capacity for the GPUs: power brake, Xid 79 under load)",
    "power_loss": "power loss: %s %s (the node lost power or was powered off unexpectedly)",
    "thermal_shutdown": "thermal shutdown: %s %s",
    "thermal_critical": "critical temperature: %s %s",
    "board_critical": "mainboard critical event: %s %s",
}


def body(check):
    since, until = check.window(DEFAULT_WINDOW_S, MIN_WINDOW_S)
    cmd = check.run(["ipmitool", "sel", "elist"], timeout=50)
    if cmd.missing:
        check.unknown("ipmitool not found: cannot read the BMC event log")
    if not cmd.ok:
        if re.search(r"Could not open device|No such file|ipmi", cmd.text, re.I):
            check.unknown("no in-band IPMI access to the BMC (%s)" % checklib.first_line(cmd.text))
        check.unknown(cmd.why())
    events = parse_elist(cmd.out)
    check.metrics["sel_entries"] = len(events)
    if not events and "no entries" not in cmd.text.lower() and cmd.out.strip():
        check.unknown("unparseable ipmitool sel elist output: %s" % checklib.first_line(cmd.out))
    recent, hot, shutdowns = [], [], []
    for epoch, sensor, event, direction, raw in events:
        in_window = epoch is not None and since <= epoch <= until
        if in_window and direction.lower().startswith("asserted") and SHUTDOWN.search(event):
            shutdowns.append(epoch)
        kind = classify(sensor, event, direction)
        if kind is None:
            continue
        message = MESSAGES[kind] % (sensor, event)
        if not in_window:
            when = ("at an unknown time (Pre-Init)" if epoch is None else "before the incident's window (history)"
                    if epoch < since else "after the incident")
            check.info(kind, sensor, "%s, %s" % (message, when), raw)
            continue
        recent.append(kind)
        if kind == "thermal_critical":
            hot.append((epoch, sensor, event, raw))
        else:
            check.fail(kind, sensor, message, raw)
    ac_lost = [f for f in check.findings if f["id"] == "psu" and f["severity"] == "FAIL"
               and re.search(r"ac lost|input lost", f["message"], re.I)]
    if len(set(f["entity"] for f in ac_lost)) >= 2:
        # every supply losing its input at once is the feed, not the supplies
        for f in ac_lost:
            f["id"] = "power_loss"
            f["message"] = "power loss: %s lost AC input together with the other supplies" % f["entity"]
    if hot:
        epoch, sensor, event, raw = hot[0]
        if any(t >= epoch for t in shutdowns) or "thermal_shutdown" in recent:
            check.fail("thermal_shutdown", sensor, "thermal shutdown: %s %s, then the node powered off"
                       % (sensor, event), raw)
            # the power-off a thermal trip causes is not a separate power event
            check.findings = [f for f in check.findings if f["id"] != "power_loss"]
        else:
            check.warn("thermal_critical", sensor, "critical temperature without a shutdown: %s %s"
                       % (sensor, event), raw)
    check.metrics["critical_events"] = len(recent)
    check.finish("no critical SEL events in the %d h before the incident (%d entries)"
                 % ((until - since - checklib.AFTER_INCIDENT_S) // 3600, len(events)))


if __name__ == "__main__":
    checklib.main("bmc_sel", body)
