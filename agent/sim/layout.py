"""Where a simulated host's GPUs and RDMA NICs sit on PCIe: bus ids, NUMA nodes and the switches above them.

Three shapes, chosen by form factor and machine kind:
- an HGX baseboard: each GPU behind its own PCIe switch that also carries its NIC rail (topo: PIX), the first
  four slots on socket 0, the rest on socket 1;
- a bare-metal PCIe box: a two-socket server holds cards in pairs behind a PCIe switch (PIX within a pair,
  NODE across pairs of a socket, SYS across sockets); a one-socket workstation puts them on root ports (NODE);
- a VM: every device on the virtual root bus without switches (PHB between GPUs), numbered down from slot
  0x1E as on AWS g5 (one GPU: 00:1E.0; four: 00:1B.0..00:1E.0).
"""

from __future__ import annotations

from dataclasses import dataclass

HGX_GPU_BUSES = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
HGX_NIC_BUSES = ["1a", "3c", "4d", "5e", "9c", "bc", "cc", "dc"]
SERVER_GPU_BUSES = ["1B", "1C", "3D", "3E", "9B", "9C", "BD", "BE"]  # pairs behind switches 19, 3B, 99, BB
WORKSTATION_GPU_BUSES = ["01", "21", "41", "61", "81", "A1", "C1", "E1"]
CONTROL_NIC_BUS = "0000:0c:00.0"  # clear of the NVSwitches at 05..0a


@dataclass(frozen=True)
class Slot:
    bus_id: str  # nvidia-smi spelling: 00000000:18:00.0
    numa_node: int
    switch: str  # sysfs spelling of the PCIe switch port above the GPU; "" when on a root port
    nic_bus_id: str  # the NIC behind the same switch (HGX rails); "" when none


def gpu_slots(form_factor: str, vm: bool, count: int, numa_nodes: int) -> list[Slot]:
    if form_factor == "sxm":
        return [_hgx(i, numa_nodes) for i in range(count)]
    if vm:
        first = 0x1E - count + 1
        return [Slot(f"00000000:00:{first + i:02X}.0", _half(i, count, numa_nodes), "", "") for i in range(count)]
    if numa_nodes == 1:
        return [Slot(f"00000000:{WORKSTATION_GPU_BUSES[i % 8]}:00.0", 0, "", "") for i in range(count)]
    slots = []
    for i in range(count):
        bus = SERVER_GPU_BUSES[i % 8]
        switch = f"0000:{int(SERVER_GPU_BUSES[(i % 8) & ~1], 16) - 2:02x}:00.0"
        slots.append(Slot(f"00000000:{bus}:00.0", 0 if i % 8 < 4 else numa_nodes - 1, switch, ""))
    return slots


def _hgx(i: int, numa_nodes: int) -> Slot:
    bus = HGX_GPU_BUSES[i % 8]
    return Slot(f"00000000:{bus}:00.0", 0 if i % 8 < 4 else numa_nodes - 1, f"0000:{int(bus, 16) - 2:02x}:00.0",
                f"0000:{HGX_NIC_BUSES[i % 8]}:00.0")


def _half(i: int, count: int, numa_nodes: int) -> int:
    # small VM shapes get one NUMA node; the largest split their devices across the host's sockets
    return 0 if numa_nodes == 1 or count < 8 or i < count // 2 else numa_nodes - 1


def rail_bus_id(k: int, slots: list[Slot]) -> str:
    """The k-th RDMA rail: paired with the k-th GPU's switch on an HGX board, else on its own root port."""
    if k < len(slots) and slots[k].nic_bus_id:
        return slots[k].nic_bus_id
    return f"0000:{0xc1 + k:02x}:00.0"
