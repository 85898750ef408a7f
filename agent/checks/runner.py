"""Run checks on hosts: approval gate for non-passive tiers, fan-out, per-(host, check) cache, parsing
script output into `CheckResult`, and the cross-host comparison of metrics the manifest names."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from agent import inventory as inv
from agent.checks.manifest import CheckSpec, Manifest, load_known_bad, load_manifest
from agent.executors.base import Executor, ScriptRun
from agent.models import CheckResult, Finding, Verdict, to_result

Approver = Callable[[CheckSpec, str], bool]
Job = tuple[str, str]  # (host, check id)
# the investigation's limits: of the jobs about to execute, those refused, each with the reason
Admit = Callable[[list[Job]], dict[Job, str]]
# told the script's whole stdout (host, check id, stdout) as it executed, from the worker thread that ran it
RawSink = Callable[[str, str, str], None]

# hosts checked at once (each with up to `workers` checks at once): the best wall over SSH at 64 and 256 hosts in
# eval/bench_fanout.py (eval/results/fanout.md); raise it for a fleet of real nodes (docs/faces/cli.md)
DEFAULT_PARALLEL_HOSTS = 8
# characters of what a check saw (its commands' stdout and stderr, the files it read) a script reports whole when a
# raw sink wants it (the evidence bundle)
RAW_LIMIT_CHARS = 4 << 20


class CheckNotAllowed(KeyError):
    """A check id outside the manifest: only the manifest's scripts ever run (the allowlist)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class CheckRunner:
    """One runner per incident: results are cached per (host, check) for its lifetime.

    Each host's inventory is taken before its first check (or up front by `take_inventory`): the checks get the
    expectations derived from it, and a host that cannot be checked (unreachable, no NVIDIA GPU and no driver)
    runs nothing; its checks answer UNKNOWN with the reason (the diagnosis asks only the `checkable` hosts)."""

    def __init__(self, executors: list[Executor], *, approve: bool | Approver = False,
                 profile_name: str | None = None, params: dict[str, Any] | None = None,
                 manifest: Manifest | None = None, workers: int = 4,
                 max_parallel_hosts: int = DEFAULT_PARALLEL_HOSTS,
                 on_result: Callable[[CheckResult], None] | None = None):
        self.executors = {e.name: e for e in executors}
        self.manifest = manifest or load_manifest()
        self.approve = approve
        self.profile_name = profile_name  # --profile: overrides what the inventory would pick
        self.inventories: dict[str, inv.HostInventory] = {}
        self.expectations: dict[str, inv.Expectations] = {}
        self.params = params or {}
        # check id -> params only that check gets (the job's logs for job_logs: `attach_logs`)
        self.check_params: dict[str, dict[str, Any]] = {}
        # checks at once on one host (an SSH connection multiplexes them; OpenSSH allows 10 sessions per
        # connection), and hosts at once: the fan-out limit, so 256 hosts are not 256 handshakes at the same time
        self.workers = max(1, workers)
        self.max_parallel_hosts = max(1, max_parallel_hosts)
        self.raw_sink: RawSink | None = None  # set: scripts report what they saw whole (RAW_LIMIT_CHARS)
        self.on_result = on_result
        self.cache: dict[tuple[str, str], CheckResult] = {}
        self.exit_codes: dict[tuple[str, str], int | None] = {}  # (host, check) -> the script's exit code, for audit
        self.admit: Admit | None = None
        self.listeners: list[Callable[[CheckResult], None]] = []  # told of every result that actually executed
        self.wall_s = 0.0  # time spent waiting for checks (they run in parallel, so less than the sum)
        self._inventory_lock = threading.Lock()  # one inventory per host, whoever asks first (see prefetch)
        # (host, check) -> (the params it was started with, its run): started early by `prefetch`, taken by _run_one
        self._early: dict[tuple[str, str], tuple[str, Future[ScriptRun]]] = {}

    # ---- what each host is ------------------------------------------------------------------------------------
    def take_inventory(self, hosts: Iterable[str] | None = None) -> dict[str, inv.Expectations]:
        """Inventory and expectations of every host (in parallel), once per host for the runner's lifetime."""
        names = list(hosts if hosts is not None else self.executors)
        with self._inventory_lock:
            self._take(names)
        return {h: self.expectations[h] for h in names}

    def _take(self, names: list[str]) -> None:
        todo = [h for h in names if h not in self.expectations]
        if todo:
            with ThreadPoolExecutor(max_workers=min(self.max_parallel_hosts, len(todo))) as pool:
                for taken in pool.map(lambda h: inv.take(self.executors[h]), todo):
                    self.adopt(taken)

    def attach_logs(self, path: str | None) -> None:
        """The checks that read the job's logs (manifest `needs: [logs]`) get the tail of each file under `path`
        (agent/checks/joblogs.py) in their params; without logs they answer UNKNOWN."""
        if not path:
            return
        from agent.checks.joblogs import read_job_logs

        files = read_job_logs(path)
        for spec in self.manifest.checks:
            if "logs" in spec.needs:
                self.check_params[spec.id] = {"job_logs": files, "job_logs_dir": str(path)}

    def judge_events_at(self, at: float | None) -> None:
        """The checks judge log events against the incident's time (epoch seconds), not the moment they run; the
        first time given stays (a resumed run, or the graph after the early start, gives the same)."""
        if at is not None:
            self.params.setdefault("incident_at", at)

    def prefetch(self, check_ids: Iterable[str] = ()) -> threading.Thread:
        """Start, in the background, the inventory of every host and then the passive checks `check_ids` on the
        hosts it can check, so that the host work overlaps whatever the caller does meanwhile (a cold CLI imports
        its graph library). Nothing is decided early: the next `run` takes an early script run only for the same
        host, check and params, at the moment it would have started it, and handles it exactly as one it started
        itself (limits, listeners, cache); the early runs that `run` does not take are dropped. Checks that need
        approval never start early. An error here is dropped too: `take_inventory` and `run` meet it again."""
        specs = [s for s in self.allowed(check_ids) if not s.needs_approval]

        def work() -> None:
            try:
                with self._inventory_lock:  # `run` takes this lock first: it sees every early run registered
                    self._take(list(self.executors))
                    jobs = [(h, s) for s in specs for h in self.executors
                            if not self.expectations[h].cannot_check and (h, s.id) not in self.cache]
                    started = []
                    for host, spec in jobs:
                        params = self._params(host, spec.id)
                        future: Future[ScriptRun] = Future()
                        self._early[(host, spec.id)] = (json.dumps(params, sort_keys=True), future)
                        started.append((future, self.executors[host], spec, params))
                    _in_background(started, self.workers)
            except Exception:  # best effort (see above)
                pass

        thread = threading.Thread(target=work, name="aidai-prefetch", daemon=True)
        thread.start()
        return thread

    def adopt(self, inventory: inv.HostInventory, expectations: inv.Expectations | None = None) -> None:
        """Use an inventory taken earlier (a resumed run's checkpoint holds it)."""
        self.inventories[inventory.host] = inventory
        self.expectations[inventory.host] = expectations or inv.expectations(inventory, self.profile_name)

    def checkable(self) -> list[str]:
        self.take_inventory()
        return [h for h in self.executors if not self.expectations[h].cannot_check]

    def passive_ids(self, include_active: bool = False) -> list[str]:
        return [c.id for c in self.manifest.checks if c.tier == "passive" or include_active]

    def allowed(self, check_ids: Iterable[str]) -> list[CheckSpec]:
        """The specs of `check_ids`; any id not in the manifest refuses the whole batch before anything runs."""
        ids = list(check_ids)
        known = set(self.manifest.ids())
        refused = [c for c in ids if c not in known]
        if refused:
            raise CheckNotAllowed(f"check(s) {', '.join(map(repr, refused))} refused: not in the manifest's allowlist "
                                  f"(verification_scripts/manifest.yaml); allowed: {', '.join(self.manifest.ids())}")
        return [self.manifest.get(cid) for cid in ids]

    def run(self, check_ids: Iterable[str], hosts: Iterable[str] | None = None) -> list[CheckResult]:
        specs = self.allowed(check_ids)
        names = list(hosts) if hosts is not None else list(self.executors)
        for name in names:
            if name not in self.executors:
                raise KeyError(f"unknown host {name!r}; known: {', '.join(self.executors)}")
        self.take_inventory(names)
        jobs = [(name, spec) for spec in specs for name in names]
        results: dict[tuple[str, str], CheckResult] = {}
        todo = []
        for name, spec in jobs:
            cached = self.cache.get((name, spec.id))
            if cached is not None:
                results[(name, spec.id)] = cached.model_copy(update={"cached": True})
            else:
                todo.append((name, spec))
        # approvals are asked here, one at a time, before anything runs in parallel
        approved = {(n, s.id): not s.needs_approval or self._approved(s, n) for n, s in todo}
        # a check of the attached logs reads nothing of the host: it runs where no GPU check can
        refused = {(n, s.id): f"could not check {n}: {why}" for n, s in todo
                   if (why := self.expectations[n].cannot_check) and not s.reads_attachments}
        admitted = [key for key, ok in approved.items() if ok and key not in refused]
        refused |= self.admit(admitted) if self.admit and admitted else {}
        for name, spec in todo:
            if (name, spec.id) in refused:  # not cached: the limit is the run's, not a fact about the host
                reason = refused[(name, spec.id)]
                results[(name, spec.id)] = CheckResult(check=spec.id, host=name, verdict=Verdict.UNKNOWN,
                                                       tier=spec.tier, expected_cost_s=spec.expected_cost_s,
                                                       summary=f"not run: {reason}", reason=reason)
        todo = [(n, s) for n, s in todo if (n, s.id) not in refused]
        began = time.perf_counter()
        results |= self._fan_out(todo, approved)
        self.wall_s += time.perf_counter() - began
        self._early.clear()  # good for this run only: a later run must not get a result from the past
        self._compare_across_hosts(specs, names, results)
        for key in ((n, s.id) for n, s in todo):
            self.cache[key] = results[key]
            if self.on_result:
                self.on_result(results[key])
            if approved[key]:
                for listener in self.listeners:
                    listener(results[key])
        return [results[(name, spec.id)] for name, spec in jobs]

    def _fan_out(self, todo: list[tuple[str, CheckSpec]], approved: dict[Job, bool]) -> dict[Job, CheckResult]:
        """Up to `max_parallel_hosts` hosts at once, each running its checks `workers` at a time."""
        by_host: dict[str, list[CheckSpec]] = {}
        for name, spec in todo:
            by_host.setdefault(name, []).append(spec)

        def one_host(name: str) -> list[CheckResult]:
            specs = by_host[name]
            if len(specs) == 1 or self.workers == 1:
                return [self._run_one(name, spec, approved[(name, spec.id)]) for spec in specs]
            with ThreadPoolExecutor(max_workers=min(self.workers, len(specs))) as pool:
                return list(pool.map(lambda spec: self._run_one(name, spec, approved[(name, spec.id)]), specs))

        if not by_host:
            return {}
        out: dict[Job, CheckResult] = {}
        with ThreadPoolExecutor(max_workers=min(self.max_parallel_hosts, len(by_host))) as pool:
            for name, done in zip(by_host, pool.map(one_host, by_host), strict=True):
                out |= {(name, result.check): result for result in done}
        return out

    def _run_one(self, host: str, spec: CheckSpec, approved: bool) -> CheckResult:
        if not approved:
            return CheckResult(check=spec.id, host=host, verdict=Verdict.UNKNOWN, tier=spec.tier,
                               expected_cost_s=spec.expected_cost_s,
                               summary=f"not run: {spec.tier} check needs approval",
                               reason=f"{spec.tier} check ({spec.description}; about {spec.expected_cost_s:.0f} s, "
                                      f"needs {', '.join(spec.needs) or 'nothing'}) was not approved; "
                                      f"it runs only with the operator's approval")
        params = self._params(host, spec.id)
        early = self._early.pop((host, spec.id), None)
        if early is not None and early[0] == json.dumps(params, sort_keys=True):
            run = early[1].result()
        else:  # none, or started with other params (the incident's time was set since): run it now
            run = self.executors[host].run_script(spec.script_path, params, spec.timeout_s)
        self.exit_codes[(host, spec.id)] = run.rc
        if self.raw_sink is not None and run.stdout:
            self.raw_sink(host, spec.id, run.stdout)
        return to_result(spec, host, run)

    def _params(self, host: str, check: str = "") -> dict[str, Any]:
        return {"host": host, "profile": self.expectations[host].values, "known_bad": load_known_bad(),
                "window_s": 7200, **({"raw_limit": RAW_LIMIT_CHARS} if self.raw_sink else {}), **self.params,
                **self.check_params.get(check, {})}

    def _approved(self, spec: CheckSpec, host: str) -> bool:
        if callable(self.approve):
            return bool(self.approve(spec, host))
        return bool(self.approve)

    def _compare_across_hosts(self, specs: list[CheckSpec], names: list[str],
                              results: dict[tuple[str, str], CheckResult]) -> None:
        if len(names) < 2:
            return
        for spec in specs:
            for key in spec.compare:
                values = {n: results[(n, spec.id)].metrics.get(key) for n in names
                          if results[(n, spec.id)].verdict != Verdict.UNKNOWN}
                values = {n: v for n, v in values.items() if v is not None}
                seen = {json.dumps(v, sort_keys=True) for v in values.values()}
                if len(seen) < 2:
                    continue
                counts = Counter(json.dumps(v, sort_keys=True) for v in values.values())
                top, top_n = counts.most_common(1)[0]
                has_majority = top_n > len(values) / 2
                listing = ", ".join(f"{n}={v}" for n, v in values.items())
                for name, value in values.items():
                    if has_majority and json.dumps(value, sort_keys=True) == top:
                        continue
                    result = results[(name, spec.id)]
                    result.findings.append(Finding(id=f"cross_host_{key}", severity="FAIL", entity=name,
                                                   message=f"{key} differs across hosts: {listing}"))
                    result.verdict = Verdict.FAIL
                    result.summary = f"{key} differs across hosts ({listing}); {result.summary}"


def _in_background(jobs: list[tuple[Future[ScriptRun], Executor, CheckSpec, dict[str, Any]]], workers: int) -> None:
    """Run the scripts on at most `workers` daemon threads (a process that exits early does not wait for them, as
    it would for a ThreadPoolExecutor's), each outcome into its future."""
    todo = list(reversed(jobs))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                future, executor, spec, params = todo.pop()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(executor.run_script(spec.script_path, params, spec.timeout_s))
            except BaseException as exc:  # the future carries it to whoever takes the run
                future.set_exception(exc)

    for _ in range(min(workers, len(jobs))):
        threading.Thread(target=worker, name="aidai-prefetch-run", daemon=True).start()
