"""The `torch` a simulated host's Python imports (written into its py/ dir by python_env.py).

The probe scripts that import it are the real ones; only this module is simulated. It behaves like
torch for exactly the calls the probes make (versions, torch.cuda device queries, 4 MiB
allocations, a tiny kernel, seeded BF16 GEMMs timed with CUDA events, NCCL and cuDNN versions) and
raises the real CUDA error texts wherever the host state says CUDA would fail.
Tensors are symbolic: they carry a canonical key of the value they hold, a magnitude and an error
bound, so a GEMM on a defective SM differs from the FP64 reference and timing follows perf_factor.
"""

from __future__ import annotations

import builtins
import hashlib
import math
import os
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

from agent.checks.versions import vkey
from agent.sim.state import Gpu, HostState
from agent.sim.state.hardware import part
from agent.sim.tools import _nvml as nvml
from agent.sim.tools._versions import min_driver_for

CUDA_TAIL = ("\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
             "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.\nCompile with "
             "`TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
UNKNOWN = ("CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env variable "
           "CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero.")
NO_DRIVER = ("Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver "
             "from http://www.nvidia.com/Download/index.aspx")
COUNT_ERROR = ("Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
               "NumCudaDevices() that might have already set an error? Error {}")
CONTEXT_MIB = 600  # a CUDA context plus the probe's buffers
MAX_NORMAL = 4.5  # max |x| of a large standard-normal sample


class DType:
    def __init__(self, name: str, itemsize: int, eps: float):
        self.name, self.itemsize, self.eps = name, itemsize, eps

    def __repr__(self) -> str:
        return f"torch.{self.name}"


float32, float64 = DType("float32", 4, 2.0 ** -24), DType("float64", 8, 2.0 ** -53)
bfloat16, float16 = DType("bfloat16", 2, 2.0 ** -9), DType("float16", 2, 2.0 ** -11)


class Device:
    type: str
    index: int | None  # set for every cuda device (the current one when none is named), None for the cpu

    def __init__(self, kind: Any, index: int | None = None):
        if isinstance(kind, Device):
            kind, index = kind.type, kind.index
        elif isinstance(kind, int):
            kind, index = "cuda", kind
        elif ":" in str(kind):
            kind, idx = str(kind).split(":", 1)
            index = int(idx)
        self.type, self.index = str(kind), index
        if self.type == "cuda" and self.index is None:
            self.index = _RT.current

    def __repr__(self) -> str:
        return f"device(type='{self.type}', index={self.index})" if self.type == "cuda" else "device(type='cpu')"


class Generator:
    def __init__(self) -> None:
        self.seed, self.draws = 0, 0

    def manual_seed(self, seed: int) -> Generator:
        self.seed = int(seed)
        return self


class Runtime:
    """What the CUDA driver API of this host lets a process do."""

    def __init__(self, host: HostState):
        self.host, self.current, self.initialised = host, 0, False
        self.error = self._init_error()
        self.gpus: list[Gpu] = [] if self.error else self._visible()
        self.clock = [0.0] * len(self.gpus)

    def _libcuda(self) -> str:
        """Version of the libcuda the process loads: the container's compat copy when it is on the path."""
        compat = self.host.software.container_cuda_driver
        if compat and "/usr/local/cuda/compat" in os.environ.get("LD_LIBRARY_PATH", ""):
            return compat
        return self.host.driver.version

    def _init_error(self) -> str | None:
        host, drv = self.host, self.host.driver
        if not drv.installed or not drv.module_loaded or not nvml.tools_present(host):
            return "no CUDA-capable device is detected" if host.container.inside else NO_DRIVER
        if not drv.device_nodes:
            return "no CUDA-capable device is detected"
        if drv.version != drv.kernel_module_version:
            return COUNT_ERROR.format("803: system has unsupported display driver / cuda driver combination")
        if host.container.inside and not host.container.devices_cgroup_ok:
            return UNKNOWN
        if not drv.uvm_device_nodes or not drv.uvm_healthy:
            return UNKNOWN
        need = min_driver_for(host.software.torch_cuda)
        if need and vkey(self._libcuda()) < vkey(need):
            return "CUDA driver version is insufficient for CUDA runtime version"
        fm = host.fabric_manager
        if host.nvswitch_count and (not fm.active or fm.state != "Completed"):
            return COUNT_ERROR.format("802: system not yet initialized")
        return None

    def _visible(self) -> list[Gpu]:
        gpus = nvml.cuda_devices(self.host)
        spec = os.environ.get("CUDA_VISIBLE_DEVICES")
        if spec is None:
            return gpus
        chosen: list[Gpu] = []
        for item in (s.strip() for s in spec.split(",")):
            match = next((g for g in gpus if item == str(gpus.index(g)) or item.lower() == g.uuid.lower()
                          or item in g.mig_instances), None)
            if match is None:
                break  # CUDA stops at the first entry it cannot resolve
            if item.startswith("MIG-") and any(c.mig_mode for c in chosen):
                break  # one process can use one MIG instance only
            chosen.append(match)
        return chosen

    def gpu(self, index: int | None) -> Gpu:
        index = self.current if index is None else index
        if not 0 <= index < len(self.gpus):
            raise RuntimeError("CUDA error: invalid device ordinal" + CUDA_TAIL)
        return self.gpus[index]

    def lazy_init(self) -> None:
        if self.error:
            raise RuntimeError(self.error)
        if not self.gpus:
            raise RuntimeError("No CUDA GPUs are available")
        if not self.initialised:
            self.initialised = True
            arch = self.host.software.torch_arch_list
            for gpu in self.gpus:
                if not supports(arch, gpu.compute_capability):
                    sm = "sm_" + gpu.compute_capability.replace(".", "")
                    warnings.warn(f"\n{gpu.name} with CUDA capability {sm} is not compatible with the current PyTorch "
                                  f"installation.\nThe current PyTorch install supports CUDA capabilities "
                                  f"{' '.join(arch)}.\nIf you want to use the {gpu.name} GPU with PyTorch, please "
                                  "check the instructions at https://pytorch.org/get-started/locally/\n",
                                  UserWarning, stacklevel=3)

    def context(self, index: int | None) -> Gpu:
        """Open (or reuse) the CUDA context on a device: raises what the device's state makes CUDA raise."""
        self.lazy_init()
        gpu = self.gpu(index)
        compat = self.host.software.container_cuda_driver
        if self.host.container.inside and compat and self._libcuda() != self.host.driver.kernel_module_version:
            raise RuntimeError("CUDA error: invalid device ordinal" + CUDA_TAIL)
        if gpu.cuda_error:
            text = gpu.cuda_error if gpu.cuda_error.startswith("CUDA") else "CUDA error: " + gpu.cuda_error
            raise RuntimeError(text + CUDA_TAIL)
        return gpu

    def kernel(self, index: int | None) -> Gpu:
        gpu = self.context(index)
        if not supports(self.host.software.torch_arch_list, gpu.compute_capability):
            raise RuntimeError("CUDA error: no kernel image is available for execution on the device" + CUDA_TAIL)
        return gpu

    def allocate(self, index: int | None, nbytes: int) -> None:
        gpu = self.context(index)
        used = sum(p.used_mib for p in gpu.processes)
        free = gpu.memory_total_mib - used
        if free - CONTEXT_MIB < nbytes / 2**20:
            total = gpu.memory_total_mib / 1024
            raise RuntimeError(f"CUDA out of memory. Tried to allocate {nbytes / 2**20:.2f} MiB (GPU {index}; "
                               f"{total:.2f} GiB total capacity; {free / 1024:.2f} GiB free)")

    def gemm_seconds(self, index: int | None, flops: float) -> float:
        gpu = self.gpu(index)
        peak = part(gpu.pci_device_id).bf16_tflops
        jitter = 1.0 + (int(hashlib.sha256(gpu.uuid.encode()).hexdigest()[:4], 16) % 100 - 50) / 10000.0
        return flops / (peak * 1e12 * max(gpu.perf_factor, 1e-3) * jitter)


def supports(arch_list: list[str], capability: str) -> bool:
    """A build runs on a GPU if it has SASS of the same major (minor <= the GPU's) or PTX at or below it."""
    major, minor = (int(x) for x in capability.split("."))
    want = major * 10 + minor
    for arch in arch_list:
        kind, _, num = arch.partition("_")
        value = int(num) if num.isdigit() else 0
        if kind == "sm" and value // 10 == major and value <= want:
            return True
        if kind == "compute" and value <= want:
            return True
    return False


_RT: Runtime  # set by install()


class Tensor:
    """A symbolic tensor: `key` names the exact value, `scale` its largest |entry|, `err` the max abs error."""

    def __init__(self, shape: tuple[int, ...], key: tuple, scale: float, err: float = 0.0, dtype_: DType = float32,
                 dev: Device | None = None, fill: float | None = None):
        self.shape, self.key, self.scale, self.err = tuple(shape), key, scale, err
        self.dtype, self.device, self.fill = dtype_, dev or Device("cpu"), fill

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def numel(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def _like(self, **changes: Any) -> Tensor:
        fields: dict[str, Any] = {"shape": self.shape, "key": self.key, "scale": self.scale, "err": self.err,
                                  "dtype_": self.dtype, "dev": self.device, "fill": self.fill}
        fields.update(changes)
        return Tensor(**fields)

    def _launch(self) -> None:
        if self.is_cuda:
            _RT.kernel(self.device.index)

    def to(self, *args: Any, dtype: DType | None = None, **_kw: Any) -> Tensor:
        out = self
        for arg in args:
            if isinstance(arg, DType):
                dtype = arg
            else:
                target = Device(arg)
                if target.type == "cuda":
                    _RT.allocate(target.index, self.numel() * self.dtype.itemsize)
                out = out._like(dev=target)
        if dtype is not None and dtype is not out.dtype:
            out._launch()
            err = out.err + out.scale * dtype.eps if dtype.eps > out.dtype.eps else out.err
            out = out._like(dtype_=dtype, err=err)
        return out

    def double(self) -> Tensor:
        return self.to(float64)

    def float(self) -> Tensor:
        return self.to(float32)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def cuda(self, index: int | None = None) -> Tensor:
        return self.to(Device("cuda", index))

    def __getitem__(self, item: Any) -> Tensor:
        items = item if isinstance(item, tuple) else (item,)
        bounds, shape = [], []
        for dim, size in enumerate(self.shape):
            part = items[dim] if dim < len(items) else slice(None)
            start, stop, _ = part.indices(size) if isinstance(part, slice) else (int(part), int(part) + 1, 1)
            bounds.append((start, stop))
            shape.append(stop - start)
        if shape == list(self.shape):
            return self
        return self._like(shape=tuple(shape), key=_slice_key(self.key, tuple(bounds), self.shape))

    def __matmul__(self, other: Tensor) -> Tensor:
        return matmul(self, other)

    def __mul__(self, k: builtins.float) -> Tensor:
        self._launch()
        return self._like(key=("mul", self.key, k), scale=self.scale * abs(k), err=self.err * abs(k),
                          fill=None if self.fill is None else self.fill * k)

    __rmul__ = __mul__

    def __sub__(self, other: Tensor) -> Tensor:
        self._launch()
        if self.key == other.key:
            return self._like(key=("zero",), scale=self.err + other.err, err=0.0, fill=None)
        return self._like(key=("sub", self.key, other.key), scale=max(self.scale, other.scale), fill=None)

    def abs(self) -> Tensor:
        self._launch()
        return self._like(key=("abs", self.key), fill=None if self.fill is None else abs(self.fill))

    def max(self) -> Tensor:
        self._launch()
        return self._like(shape=(), key=("max", self.key), fill=self.scale if self.fill is None else self.fill)

    def sum(self) -> Tensor:
        self._launch()
        n = self.numel()
        if self.fill is not None:
            value = self.fill * n
        elif self.key[0] == "abs":
            value = n * self.scale / MAX_NORMAL * 0.8  # mean |x| of a normal is 0.8 sigma
        else:
            digest = int(hashlib.sha256(repr(self.key).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF - 0.5
            value = digest * self.scale / MAX_NORMAL * math.sqrt(n)
        return self._like(shape=(), key=("sum", self.key), fill=value)

    def item(self) -> builtins.float:
        if self.numel() != 1 or self.fill is None:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self.fill

    def __repr__(self) -> str:
        return f"tensor(<simulated {list(self.shape)}>, device='{self.device}', dtype={self.dtype})"


def _slice_key(key: tuple, bounds: tuple, shape: tuple) -> tuple:
    """Slicing a product slices its factors, so c[:k, :k] and a[:k] @ b[:, :k] get the same key."""
    if key[0] == "mm" and len(bounds) == 2:
        (r0, r1), (c0, c1) = bounds
        return ("mm", _slice_key(key[1], ((r0, r1), (0, key[3])), (shape[0], key[3])),
                _slice_key(key[2], ((0, key[3]), (c0, c1)), (key[3], shape[1])), key[3])
    if all(b == (0, n) for b, n in zip(bounds, shape, strict=False)):
        return key
    return ("slice", key, bounds)


def ones(*size: Any, device: Any = None, dtype: DType = float32) -> Tensor:
    shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], tuple | list) else tuple(int(s) for s in size)
    t = Tensor(shape, ("const", 1.0, shape), 1.0, dtype_=dtype, fill=1.0)
    if device is not None and Device(device).type == "cuda":
        target = Device(device)
        _RT.allocate(target.index, t.numel() * dtype.itemsize)
        t = t._like(dev=target)
        t._launch()  # the fill kernel
    return t


def randn(*size: Any, generator: Generator | None = None, dtype: DType = float32, device: Any = None) -> Tensor:
    gen = generator or Generator()
    gen.draws += 1
    shape = tuple(int(s) for s in size)
    t = Tensor(shape, ("randn", gen.seed, gen.draws, shape), MAX_NORMAL, dtype_=dtype)
    return t.to(device) if device is not None else t


def matmul(a: Tensor, b: Tensor) -> Tensor:
    if a.device.type != b.device.type or a.device.index != b.device.index:
        raise RuntimeError("Expected all tensors to be on the same device, but found at least two devices")
    k = a.shape[-1]
    key: tuple = ("mm", a.key, b.key, k)
    scale = (a.scale / MAX_NORMAL) * (b.scale / MAX_NORMAL) * math.sqrt(k) * MAX_NORMAL
    rel = max(a.err / a.scale if a.scale else 0.0, b.err / b.scale if b.scale else 0.0) + a.dtype.eps
    if a.is_cuda:
        gpu = _RT.context(a.device.index)
        _RT.allocate(a.device.index, a.shape[0] * b.shape[-1] * a.dtype.itemsize)
        _RT.clock[_ordinal(a.device)] += _RT.gemm_seconds(a.device.index, 2.0 * a.shape[0] * b.shape[-1] * k)
        if gpu.sm_defect:
            key = ("corrupt", gpu.uuid, key)
    return Tensor((a.shape[0], b.shape[-1]), key, scale, scale * rel, a.dtype, a.device)


class Event:
    def __init__(self, enable_timing: bool = False, **_kw: Any):
        self.enable_timing = enable_timing
        self.at: float | None = None
        self.index: int | None = None

    def record(self, stream: Any = None) -> None:
        self.index = _RT.current
        self.at = _RT.clock[self.index] if _RT.gpus else 0.0

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end: Event) -> float:
        if self.at is None or end.at is None:
            raise RuntimeError("CUDA error: device not ready" + CUDA_TAIL)
        return (end.at - self.at) * 1000.0


def _cuda_module(host: HostState) -> types.ModuleType:
    def is_available() -> bool:
        if _RT.error:
            warnings.warn(f"CUDA initialization: {_RT.error} (Triggered internally at ../c10/cuda/CUDAFunctions.cpp:"
                          "108.)", UserWarning, stacklevel=2)
            return False
        return bool(_RT.gpus)

    def device_count() -> int:
        return 0 if _RT.error else len(_RT.gpus)

    def set_device(index: Any) -> None:
        idx = index if isinstance(index, int) else _ordinal(Device(index))
        _RT.context(idx)
        _RT.current = idx

    def nccl_version() -> tuple[int, ...]:
        sw = host.software
        loaded = sw.nccl
        if sw.system_nccl and sw.system_nccl_dir in os.environ.get("LD_LIBRARY_PATH", ""):
            loaded = sw.system_nccl
        return tuple(vkey(loaded)[:3])

    return _module(
        "torch.cuda", is_available=is_available, device_count=device_count, set_device=set_device,
        init=_RT.lazy_init, current_device=lambda: _RT.current,
        get_device_name=lambda i=None: _name(_RT.gpu(_index(i))),
        get_device_capability=lambda i=None: tuple(int(x) for x in _RT.gpu(_index(i)).compute_capability.split(".")),
        get_arch_list=lambda: list(host.software.torch_arch_list) if is_available() else [],
        synchronize=lambda i=None: _RT.context(_index(i)) and None,
        Event=Event, nccl=_module("torch.cuda.nccl", version=nccl_version))


def _module(name: str, **attrs: Callable[..., Any] | types.ModuleType | type | str) -> types.ModuleType:
    """A module object holding `attrs`: what the probes read of one of torch's submodules."""
    module = types.ModuleType(name)
    vars(module).update(attrs)
    return module


def _ordinal(device: Device) -> int:
    """A cuda device's index (always set: the current device when none was named); the current device for the cpu,
    as CUDA calls given None take it."""
    return _RT.current if device.index is None else device.index


def _index(i: Any) -> int:
    if i is None:
        return _RT.current
    return i if isinstance(i, int) else _ordinal(Device(i))


def _name(gpu: Gpu) -> str:
    return f"{gpu.name} MIG {gpu.mig_profile}" if gpu.mig_mode and gpu.mig_profile else gpu.name


def _cudnn_code(version: str) -> int:
    major, minor, patch = ([*vkey(version), 0, 0, 0])[:3]
    return major * (10000 if major >= 9 else 1000) + minor * 100 + patch


def install(module: types.ModuleType, host_json: str) -> None:
    """Turn `module` (the generated torch/__init__.py) into the simulated torch of the host in host_json."""
    global _RT
    host = HostState.load(host_json)
    sw = host.software
    if sw.system_nccl and sw.system_nccl_dir in os.environ.get("LD_LIBRARY_PATH", "") \
            and vkey(sw.system_nccl)[:2] < vkey(sw.nccl)[:2]:
        lib = os.path.join(os.path.dirname(module.__file__ or ""), "lib", "libtorch_cuda.so")
        raise ImportError(f"{lib}: undefined symbol: ncclCommSplit")
    _RT = Runtime(host)
    version = _module("torch.version", __version__=sw.torch, cuda=sw.torch_cuda)
    backends = _module("torch.backends", cudnn=_module("torch.backends.cudnn", version=lambda: _cudnn_code(sw.cudnn),
                                                       is_available=lambda: True))
    cuda = _cuda_module(host)
    names = {"Tensor": Tensor, "Generator": Generator, "device": Device, "dtype": DType, "ones": ones,
             "randn": randn, "matmul": matmul, "float32": float32, "float64": float64, "bfloat16": bfloat16,
             "float16": float16, "float": float32, "double": float64, "half": float16, "cuda": cuda,
             "version": version, "backends": backends, "__version__": sw.torch}
    for name, value in names.items():
        setattr(module, name, value)
    for sub in (cuda, cuda.nccl, version, backends, backends.cudnn):
        sys.modules[sub.__name__] = sub
