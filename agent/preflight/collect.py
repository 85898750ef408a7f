"""Collect each host's software/hardware environment by running the existing passive verification checks
(framework_versions, gpu_inventory, container_runtime, ofed_stack, nccl_env) through the executors, so local,
ssh:// and sim: hosts all work and nothing is probed twice. Timeouts are capped: preflight must stay cheap."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agent.checks.manifest import Manifest, load_manifest
from agent.checks.runner import CheckRunner
from agent.executors.base import Executor
from agent.models import CheckResult, Verdict

CHECKS = ("framework_versions", "gpu_inventory", "container_runtime", "ofed_stack", "nccl_env")
TIMEOUT_CAP_S = 45.0
# NCCL/Gloo variables worth carrying (their values are hashed in the signature, never sent in clear)
KEY_ENV = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_NET_PLUGIN",
           "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_PROTO", "NCCL_ALGO", "NCCL_IB_PCI_RELAXED_ORDERING",
           "NCCL_DEBUG", "NCCL_CROSS_NIC", "NCCL_NET_GDR_LEVEL", "NCCL_IB_CUDA_SUPPORT")


class HostEnv(BaseModel):
    host: str
    gpu_model: str | None = None
    gpu_count: int | None = None
    driver: str | None = None
    driver_max_cuda: str | None = None
    cuda_runtime: str | None = None  # the CUDA torch was built with
    container_cuda: str | None = None
    in_container: bool | None = None
    nvcc: str | None = None
    torch: str | None = None
    nccl: str | None = None
    arch_list: list[str] = Field(default_factory=list)
    deepspeed: str | None = None
    accelerate: str | None = None
    ofed: str | None = None
    hpcx_ofed: list[str] = Field(default_factory=list)
    container_toolkit: str | None = None
    nccl_env: dict[str, str] = Field(default_factory=dict)
    unavailable: dict[str, str] = Field(default_factory=dict)  # check -> why it gave no facts

    def field_value(self, name: str) -> Any:
        return getattr(self, name)


def capped_manifest(cap_s: float = TIMEOUT_CAP_S) -> Manifest:
    specs = [s.model_copy(update={"timeout_s": min(s.timeout_s, cap_s)}) for s in load_manifest().checks
             if s.id in CHECKS]
    return Manifest(checks=specs)


def collect(executors: list[Executor], timeout_cap_s: float = TIMEOUT_CAP_S, workers: int = 4,
            runner: CheckRunner | None = None) -> list[HostEnv]:
    """With the diagnosis' own `runner`, its cache keeps the later DFS from running these checks again, and only
    the hosts it can check are asked (the others were reported once, after the inventory)."""
    if runner is None:
        runner = CheckRunner(executors, manifest=capped_manifest(timeout_cap_s), workers=workers)
        results = runner.run(list(CHECKS))
    else:
        results = runner.run(list(CHECKS), hosts=runner.checkable())
    by_host: dict[str, dict[str, CheckResult]] = {}
    for result in results:
        by_host.setdefault(result.host, {})[result.check] = result
    return [to_env(host, checks) for host, checks in by_host.items()]


def to_env(host: str, checks: dict[str, CheckResult]) -> HostEnv:
    env = HostEnv(host=host)
    for check_id, result in checks.items():
        if result.verdict == Verdict.UNKNOWN and not result.metrics:
            env.unavailable[check_id] = result.reason or result.summary
    fw = checks.get("framework_versions")
    m = fw.metrics if fw else {}
    env.driver, env.driver_max_cuda, env.cuda_runtime = _s(m.get("driver")), _s(m.get("driver_max_cuda")), \
        _s(m.get("torch_cuda"))
    env.container_cuda, env.nvcc, env.torch, env.nccl = (_s(m.get("container_cuda")), _s(m.get("nvcc")),
                                                         _s(m.get("torch")), _s(m.get("nccl")))
    env.in_container = m.get("in_container")
    env.arch_list = [str(a) for a in m.get("arch_list") or []]
    env.deepspeed, env.accelerate = _s(m.get("deepspeed")), _s(m.get("accelerate"))
    inv = checks.get("gpu_inventory")
    if inv and inv.metrics:
        names = inv.metrics.get("names") or []
        env.gpu_model = str(names[0]) if names else None
        count = inv.metrics.get("gpu_count")
        env.gpu_count = int(count) if isinstance(count, int) else None
    ofed = checks.get("ofed_stack")
    if ofed and ofed.metrics:
        env.ofed = _s(ofed.metrics.get("ofed"))
        env.hpcx_ofed = [str(v) for v in ofed.metrics.get("hpcx_ofed") or []]
    ctk = checks.get("container_runtime")
    if ctk and isinstance(ctk.metrics.get("container_toolkit"), dict):
        versions = ctk.metrics["container_toolkit"]
        env.container_toolkit = _s(versions.get("nvidia-ctk") or next(iter(versions.values()), None))
    nccl_env = checks.get("nccl_env")
    if nccl_env and isinstance(nccl_env.metrics.get("env"), dict):
        env.nccl_env = {k: str(v) for k, v in nccl_env.metrics["env"].items() if k in KEY_ENV}
    return env


def _s(value: Any) -> str | None:
    return None if value in (None, "") else str(value)
