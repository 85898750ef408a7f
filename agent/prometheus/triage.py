"""Rank an incident's hosts from the fleet's dcgm-exporter metrics in Prometheus, before any SSH.

For the incident's window (two hours before its time up to an hour after, or now if sooner: the checks' window),
each host's GPUs are read from Prometheus with server-side PromQL (a few dozen small queries whatever the window):
counters (ECC, retired pages, remapped rows, NVLink CRC/replay/recovery, PCIe replays) by their last value, their
lowest and their resets in the window and their value before it; 0/1 gauges (row remap failure/pending) by their
peak; temperatures and power by their peak; the last-Xid gauge and the clock event reasons over the window.

A series is a host's when its `Hostname` label (dcgm-exporter's, the node's own name) or its `instance` label's
host part (the scrape target, `node:9400`) is one of the host's names (its inventory hostname, the name in its host
spec, or their short forms). A host with no series, a metric a host's exporter does not export, and a Prometheus
that cannot be reached are said as such, never read as healthy.
"""

from __future__ import annotations

import ipaddress
import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from agent.models import Finding
from agent.prometheus import rules
from agent.prometheus.client import Prometheus, Series
from agent.xid_catalog import xid as catalogue

BEFORE_S = 7200.0  # the checks' default window (runner: window_s 7200)
AFTER_S = 3600.0  # checklib.AFTER_INCIDENT_S
LOOKBACK_S = 86400.0  # how far before the window a counter's earlier value is looked for
RANGE_POINTS = 500  # points per series of the range queries (Xid, clock event reasons)
MIN_STEP_S = 1.0
WEIGHT = {"FAIL": 3, "WARN": 1, "INFO": 0}
GPU_KEYS = ("gpu", "UUID", "pci_bus_id", "modelName")


class HostTriage(BaseModel):
    host: str  # the diagnosis' name for it (its host spec's name)
    names: list[str]  # what it may be called in Prometheus
    matched_by: list[str] = Field(default_factory=list)  # Hostname | instance
    series: int = 0
    score: int = 0
    findings: list[Finding] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)  # taxonomy label -> the strongest severity behind it
    not_exported: list[str] = Field(default_factory=list)
    peaks: dict[str, dict[str, float]] = Field(default_factory=dict)  # metric -> GPU -> peak in the window
    why_none: str = ""  # for a host without series: what Prometheus knows of its targets


class TriageReport(BaseModel):
    url: str
    start: float
    end: float
    hosts: list[HostTriage]  # most suspicious first; hosts without series last
    queries: int = 0

    def ranked(self) -> list[HostTriage]:
        return [h for h in self.hosts if h.score > 0]

    def unseen(self) -> list[HostTriage]:
        return [h for h in self.hosts if not h.series]


@dataclass
class Window:
    start: float
    end: float

    @classmethod
    def around(cls, at: datetime | None, now: float | None = None) -> Window:
        now = time.time() if now is None else now
        when = at.timestamp() if at is not None else now
        return cls(when - BEFORE_S, min(when + AFTER_S, now))

    @property
    def seconds(self) -> int:
        return max(math.ceil(self.end - self.start), 1)

    def describe(self) -> str:
        fmt = "%Y-%m-%d %H:%M:%SZ"
        return f"{time.strftime(fmt, time.gmtime(self.start))} to {time.strftime(fmt, time.gmtime(self.end))}"


# ---- which series are whose --------------------------------------------------------------------------------------
def _re2(text: str) -> str:
    return "".join("\\" + ch if ch in ".+*?()|[]{}^$\\" else ch for ch in text)


def _promql_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def short(name: str) -> str:
    """A host name's first label (gpu-7.cluster.local -> gpu-7); an IP address stays whole."""
    try:
        ipaddress.ip_address(name.strip("[]"))
        return name.lower()
    except ValueError:
        return name.split(".", 1)[0].lower()


def model_key(name: str) -> str:
    """A GPU model name however the exporter spells it (--replace-blanks-in-model-name writes dashes)."""
    return re.sub(r"[\s-]+", " ", name).strip().lower()


@dataclass
class HostMap:
    """Host names -> the selectors that find their series and the host a series belongs to."""

    names: dict[str, list[str]]  # host -> its names
    by_short: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for host, names in self.names.items():
            for name in names:
                self.by_short.setdefault(short(name), host)

    def selectors(self) -> list[str]:
        alternatives = "|".join(sorted({_re2(short(n)) for names in self.names.values() for n in names}))
        host = f"(?i:{alternatives})(?:\\.[^:]*)?"
        return [f"Hostname=~{_promql_string(host)}", f"instance=~{_promql_string(host + '(?::[0-9]+)?')}"]

    def owner(self, labels: dict[str, str]) -> tuple[str, str] | None:
        """(host, the label that named it) for a series."""
        if (name := labels.get("Hostname")) and (host := self.by_short.get(short(name))):
            return host, "Hostname"
        instance = labels.get("instance", "")
        hostpart = instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance.strip("[]")
        if hostpart and (host := self.by_short.get(short(hostpart))):
            return host, "instance"
        return None


# ---- reading ---------------------------------------------------------------------------------------------------
def _gpu_key(labels: dict[str, str]) -> tuple[str, ...]:
    return tuple(labels.get(k, "") for k in GPU_KEYS)


def _series_key(labels: dict[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset((k, v) for k, v in labels.items() if k != "__name__")


def _who(labels: dict[str, str]) -> str:
    gpu = labels.get("gpu")
    return f"GPU{gpu}" if gpu not in (None, "") else labels.get("device") or "a GPU"


def _where(labels: dict[str, str]) -> str:
    bits = [labels.get("pci_bus_id", ""), labels.get("UUID", "")]
    return ", ".join(b for b in bits if b)


def _fmt(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def _sample(metric: str, labels: dict[str, str], value: float) -> str:
    keys = ("Hostname", "instance", "gpu", "UUID", "pci_bus_id", "err_code")
    shown = ",".join(f'{k}="{labels[k]}"' for k in keys if k in labels)
    return f"{metric}{{{shown}}} {_fmt(value)}"


class Triage:
    def __init__(self, prom: Prometheus, hosts: HostMap, window: Window, temp_limits: dict[str, float]):
        self.prom = prom
        self.map = hosts
        self.window = window
        self.temp_limits = {model_key(k): v for k, v in temp_limits.items()}  # GPU model -> its temperature limit
        self.result = {h: HostTriage(host=h, names=names) for h, names in hosts.names.items()}
        self.exported: dict[str, set[str]] = {h: set() for h in hosts.names}
        self._ups: dict[frozenset[tuple[str, str]], tuple[str, dict[str, str], float]] | None = None

    # queries ------------------------------------------------------------------------------------------------
    def _instant(self, template: str, metric: str, at: float, range_s: float | None = None,
                 record: bool = True) -> dict[
            frozenset[tuple[str, str]], tuple[str, dict[str, str], float]]:
        """`template` with {sel} (a selector of the hosts' series) and {w}; one query, the hosts' selectors or-ed.
        Series key -> (host, labels, value)."""
        w = f"{int(range_s if range_s is not None else self.window.seconds)}s"
        query = " or ".join(template.format(sel=f"{metric}{{{s}}}", w=w) for s in self.map.selectors())
        return self._own(self.prom.query(query, at), metric, record)

    def _own(self, found: list[Series], metric: str, record: bool = True) -> dict[
            frozenset[tuple[str, str]], tuple[str, dict[str, str], float]]:
        out = {}
        for series in found:
            owner = self.map.owner(series.labels)
            if owner is None or not series.values:
                continue
            host, label = owner
            if record:
                if label not in self.result[host].matched_by:
                    self.result[host].matched_by.append(label)
                self.exported[host].add(metric)
            out[_series_key(series.labels)] = (host, series.labels, series.values[-1][1])
        return out

    # the steps ----------------------------------------------------------------------------------------------
    def run(self) -> TriageReport:
        for rule in rules.COUNTERS:
            self.counter(rule)
        for flag in rules.FLAGS:
            self.flag(flag)
        self.temperatures()
        self.xids()
        self.reasons()
        return self.report()

    def counter(self, rule: rules.CounterRule) -> None:
        end, start = self.window.end, self.window.start
        last = self._instant("last_over_time({sel}[{w}])", rule.metric, end)
        if not last:
            return
        low = self._instant("min_over_time({sel}[{w}])", rule.metric, end)
        resets = self._instant("resets({sel}[{w}])", rule.metric, end)
        before = self._instant("last_over_time({sel}[{w}])", rule.metric, start, LOOKBACK_S)
        increase = (self._instant("increase({sel}[{w}])", rule.metric, end)
                    if any(v for _, _, v in resets.values()) else {})
        for key, (host, labels, value) in last.items():
            self.result[host].series += 1
            reset = resets.get(key, (host, labels, 0.0))[2]
            earlier = before.get(key)
            rise: float
            if earlier is not None and value < earlier[2] and not reset:
                earlier = None  # reset between the last sample before the window and the first in it: undated
            if reset:
                rise, since = round(increase.get(key, (host, labels, 0.0))[2]), f"{_fmt(reset)} reset(s) in the window"
            elif earlier is not None:
                rise, since = value - earlier[2], f"from {_fmt(earlier[2])} before the window"
            else:
                rise, since = value - low.get(key, (host, labels, value))[2], "within the window"
            who = _who(labels)
            if rise > 0:
                severity = rule.severity(rise, dated=True)
                self.add(host, rule.id, severity, labels, rule.labels,
                         f"{host} {who}: {rule.what} rose by {_fmt(rise)} in the incident's window ({since}, now "
                         f"{_fmt(value)}; {rule.metric}{', ' + _where(labels) if _where(labels) else ''})",
                         _sample(rule.metric, labels, value))
            elif value > 0 and earlier is None:
                severity = rule.severity(value, dated=False)
                if severity != "INFO":
                    self.add(host, rule.id, severity, labels, rule.labels,
                             f"{host} {who}: {_fmt(value)} {rule.what} ({rule.metric}); Prometheus has no sample of "
                             "it before the window, so when they happened is not known", _sample(rule.metric, labels,
                                                                                                    value))
            elif value > 0 and value >= rule.evidence_level():
                self.add(host, f"{rule.id}_history", "INFO", labels, (),
                         f"{host} {who}: {_fmt(value)} {rule.what}, unchanged since before the incident's window: "
                         f"an old problem this GPU still carries ({rule.metric})", _sample(rule.metric, labels, value))

    def flag(self, rule: rules.FlagRule) -> None:
        peaks = self._instant("max_over_time({sel}[{w}])", rule.metric, self.window.end)
        for _, (host, labels, value) in peaks.items():
            self.result[host].series += 1
            if value >= 1:
                self.add(host, rule.id, rule.severity, labels, rule.labels,
                         f"{host} {_who(labels)}: {rule.what} ({rule.metric} = {_fmt(value)} in the window"
                         f"{', ' + _where(labels) if _where(labels) else ''})", _sample(rule.metric, labels, value))

    def temperatures(self) -> None:
        for metric in (rules.GPU_TEMP, rules.MEMORY_TEMP, rules.POWER):
            peaks = self._instant("max_over_time({sel}[{w}])", metric, self.window.end)
            for _, (host, labels, value) in peaks.items():
                self.result[host].series += 1
                self.result[host].peaks.setdefault(metric, {})[_who(labels)] = value
                who = _who(labels)
                limit = self.temp_limits.get(model_key(labels.get("modelName", ""))) if metric == rules.GPU_TEMP else (
                    rules.MEMORY_TEMP_LIMIT_C if metric == rules.MEMORY_TEMP else None)
                if limit is not None and value > limit:
                    severity = "FAIL" if metric == rules.GPU_TEMP else "WARN"
                    self.add(host, "overheating" if metric == rules.GPU_TEMP else "memory_hot", severity, labels,
                             ("GPU.THERMAL.OVERHEATING_THROTTLE",),
                             f"{host} {who}: reached {_fmt(value)} C in the window, above the {_fmt(limit)} C limit "
                             f"({metric})", _sample(metric, labels, value))

    def _range(self, metrics: tuple[str, ...]) -> list[Series]:
        span = self.window.end - self.window.start
        step = max(span / RANGE_POINTS, MIN_STEP_S)
        start = self.window.end - step * math.floor(span / step)  # a point falls on the window's end
        name = "|".join(metrics)
        query = " or ".join(f'{{__name__=~"{name}",{s}}}' for s in self.map.selectors())
        return self.prom.query_range(query, start, self.window.end, step)

    def xids(self) -> None:
        """Xids new in the window: a GPU's last-Xid value that changed inside it (or that no earlier sample
        dates); one that was already the GPU's last Xid before the window is history."""
        seen: dict[tuple[str, tuple[str, ...]], list[tuple[float, int, dict[str, str]]]] = {}
        for series in self._range((rules.XID,)):
            owner = self.map.owner(series.labels)
            if owner is None:
                continue
            host, label = owner
            if label not in self.result[host].matched_by:
                self.result[host].matched_by.append(label)
            self.exported[host].add(rules.XID)
            for t, value in series.values:
                seen.setdefault((host, _gpu_key(series.labels)), []).append((t, int(value), series.labels))
        if not seen:
            return
        before = {(host, _gpu_key(labels)): int(v) for _, (host, labels, v) in
                  self._instant("{sel}", rules.XID, self.window.start).items()}
        for (host, gpu), samples in seen.items():
            self.result[host].series += 1
            samples.sort(key=lambda s: s[0])
            previous = before.get((host, gpu))  # None: Prometheus has no sample before this one to compare
            reported: set[int] = set()
            for _, code, labels in samples:
                if code == 0 or code == previous or code in reported:
                    previous = code
                    continue
                reported.add(code)
                entry = catalogue(code)
                severity, labels_for = _xid_severity(entry), (entry.leaf,) if entry and entry.leaf else ()
                name = f"Xid {code} {entry.name}" if entry else f"Xid {code} (not in NVIDIA's catalogue)"
                action = f"; NVIDIA: {entry.immediate or entry.action}" if entry and entry.action else ""
                when = ("already the GPU's last Xid at its first sample in the window (Prometheus has nothing "
                        "older: when it happened is not known)" if previous is None else "new in the incident's window")
                self.add(host, f"xid_{code}", severity, labels, labels_for,
                         f"{host} {_who(labels)}: {name}, {when} ({rules.XID}){action}",
                         _sample(rules.XID, labels, code))
                previous = code
            if previous and not reported and before.get((host, gpu)) == previous:
                labels = samples[-1][2]
                self.add(host, f"xid_{previous}_history", "INFO", labels, (),
                         f"{host} {_who(labels)}: last Xid {previous}, already reported before the incident's window "
                         f"and none since ({rules.XID})", _sample(rules.XID, labels, previous))

    def reasons(self) -> None:
        masks: dict[tuple[str, tuple[str, ...]], tuple[int, dict[str, str], str]] = {}
        for series in self._range(rules.REASONS):
            owner = self.map.owner(series.labels)
            if owner is None:
                continue
            host, _ = owner
            metric = series.labels.get("__name__", rules.REASONS[0])
            self.exported[host].add(rules.REASONS[0])
            key = (host, _gpu_key(series.labels))
            mask = masks.get(key, (0, series.labels, metric))[0]
            for _, value in series.values:
                mask |= int(value)
            masks[key] = (mask, series.labels, metric)
        for (host, _), (mask, labels, metric) in masks.items():
            self.result[host].series += 1
            found = rules.reason_finding(mask)
            if found is None:
                continue
            finding_id, severity, labels_for = found
            self.add(host, finding_id, severity, labels, labels_for,
                     f"{host} {_who(labels)}: clock event reasons seen in the window: "
                     f"{', '.join(rules.reason_names(mask))} (0x{mask:x}, {metric})", _sample(metric, labels, mask))

    # findings and ranking -----------------------------------------------------------------------------------
    def add(self, host: str, finding_id: str, severity: str, labels: dict[str, str], taxonomy: tuple[str, ...],
            message: str, raw: str) -> None:
        result = self.result[host]
        result.findings.append(Finding(id=f"prometheus_{finding_id}", severity=severity,
                                       entity=f"{host} {_who(labels)}", message=message, raw_line=raw))
        result.score += WEIGHT.get(severity, 0)
        for label in taxonomy:
            if WEIGHT.get(severity, 0) > WEIGHT.get(result.labels.get(label, "INFO"), 0) or label not in result.labels:
                result.labels[label] = severity

    def report(self) -> TriageReport:
        for host, result in self.result.items():
            if result.series:
                result.not_exported = [m for m in rules.WATCHED if m not in self.exported[host]]
            else:
                result.why_none = self._targets(result)
        order = sorted(self.result.values(), key=lambda h: (not h.series, -h.score, h.host))
        for result in order:
            result.findings.sort(key=lambda f: -WEIGHT.get(f.severity, 0))
        return TriageReport(url=self.prom.url, start=self.window.start, end=self.window.end, hosts=order,
                            queries=self.prom.queries)

    def _targets(self, result: HostTriage) -> str:
        """What Prometheus knows of a host without DCGM series: its scrape targets' `up`."""
        if self._ups is None:
            self._ups = self._instant("last_over_time({sel}[{w}])", "up", self.window.end, record=False)
        mine = [(labels.get("instance", "?"), v) for _, (host, labels, v) in self._ups.items() if host == result.host]
        if not mine:
            return "no scrape target of Prometheus names it"
        down = [i for i, v in mine if v < 1]
        if down:
            return f"its target(s) {', '.join(sorted(down))} failed their last scrape in the window (up 0)"
        return (f"its target(s) {', '.join(sorted(i for i, _ in mine))} answer but export no DCGM_FI_* series "
                "(not a dcgm-exporter?)")


def _xid_severity(entry: Any) -> str:
    if entry is None:
        return "WARN"
    if entry.action in ("", "none"):
        return "INFO"
    if entry.action == "restart_app" or entry.app_induced:
        return "WARN"
    return "FAIL"


def triage(prom: Prometheus, names: dict[str, list[str]], window: Window,
           temp_limits: dict[str, float] | None = None) -> TriageReport:
    """Every host of `names` (host -> what Prometheus may call it) over `window`. PrometheusError when Prometheus
    cannot answer."""
    return Triage(prom, HostMap(names), window, temp_limits or {}).run()
