"""Provoke one application fault on the GPU (run each in its own process): `oob`, a PyTorch out-of-bounds index
(a device-side assert: the driver logs Xid 43); `wild`, a Triton kernel storing far past its buffer (an illegal
address: Xid 31, the MMU fault, with the process named). Nothing here changes the GPU's settings."""

import sys

import torch


def out_of_bounds() -> None:
    values = torch.zeros(16, device="cuda")
    index = torch.tensor([1 << 20], device="cuda")
    print(values[index].sum().item())


def wild_store() -> None:
    import triton
    import triton.language as tl

    @triton.jit
    def store_far(ptr, offset):  # type: ignore[no-untyped-def]
        tl.store(ptr + offset, 1.0)

    buffer = torch.zeros(16, device="cuda")
    store_far[(1,)](buffer, 1 << 40)
    torch.cuda.synchronize()
    print("no fault")


if __name__ == "__main__":
    {"oob": out_of_bounds, "wild": wild_store}[sys.argv[1]]()
