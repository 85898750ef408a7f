"""Facts about the NVIDIA parts a simulated host can carry, keyed by PCI device id (10de:XXXX).

What nvidia-smi, lspci and the fake CUDA runtime show beyond the SKU profile: the name pci.ids gives the
chip, the reference board's subsystem id, memory clock, architecture, whether the part has MIG, and the
NVSwitches its HGX baseboard exposes to the host. Clocks and names follow public nvidia-smi / lspci
outputs of each part (see verification_scripts/PROFILES.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    lspci_name: str  # what lspci prints after "NVIDIA Corporation" (pci.ids)
    subsystem: str  # PCI subsystem device id of NVIDIA's reference board
    vbios: str
    mem_clock_mhz: int  # nvidia-smi clocks.max.memory
    architecture: str  # nvidia-smi -q "Product Architecture"
    bf16_tflops: float  # what a large dense BF16 GEMM sustains on a healthy part (the fake torch's speed)
    pci_class: str = "0302"  # 3D controller; boards with display outputs enumerate as VGA controllers (0300)
    mig: bool = False
    nvswitch_id: str | None = None  # device id of the baseboard's NVSwitches when they are host PCI functions
    nvswitch_count: int = 0


PARTS: dict[str, Part] = {
    "2330": Part("GH100 [H100 SXM5 80GB]", "16c1", "96.00.89.00.01", 2619, "Hopper", 665.0, mig=True,
                 nvswitch_id="22a3", nvswitch_count=4),
    "2335": Part("GH100 [H200 SXM 141GB]", "18be", "96.00.A5.00.01", 3201, "Hopper", 690.0, mig=True,
                 nvswitch_id="22a3", nvswitch_count=4),
    "20b2": Part("GA100 [A100 SXM4 80GB]", "1463", "92.00.45.00.03", 1593, "Ampere", 255.0, mig=True,
                 nvswitch_id="1af1", nvswitch_count=6),
    # HGX B200's two NVLink 5 switch chips are managed through a ConnectX-7 bridge (NVLink Subnet Manager),
    # not as nvidia-nvswitch PCI functions, so the host lists no 10de bridges for them
    "2901": Part("GB100 [B200]", "1999", "97.00.6D.00.01", 3996, "Blackwell", 1500.0, mig=True,
                 nvswitch_count=2),
    "2331": Part("GH100 [H100 PCIe]", "1626", "96.00.5E.00.01", 1593, "Hopper", 500.0, mig=True),
    "20f1": Part("GA100 [A100 PCIe 40GB]", "145f", "92.00.25.00.08", 1215, "Ampere", 235.0, mig=True),
    "20b5": Part("GA100 [A100 PCIe 80GB]", "1533", "92.00.90.00.04", 1512, "Ampere", 240.0, mig=True),
    "26b9": Part("AD102GL [L40S]", "1851", "95.02.66.00.02", 9001, "Ada Lovelace", 250.0),
    "27b8": Part("AD104GL [L4]", "16ca", "95.04.29.00.06", 6251, "Ada Lovelace", 85.0),
    "2237": Part("GA102GL [A10G]", "152f", "94.02.75.00.01", 6251, "Ampere", 55.0),
    "26b1": Part("AD102GL [RTX 6000 Ada Generation]", "16a1", "95.02.5D.00.01", 10001, "Ada Lovelace", 250.0,
                 pci_class="0300"),
}
# a part this table does not know: lspci says "Device XXXX"; on an NVSwitch board, HGX H100's switches
GENERIC = Part("", "0000", "96.00.89.00.01", 2619, "Hopper", 300.0, nvswitch_id="22a3", nvswitch_count=4)
NVSWITCH_NAMES = {"22a3": "GH100 [H100 NVSwitch]", "1af1": "GA100 [A100 NVSwitch]"}
NVSWITCH_BUS_IDS = ["05", "06", "07", "08", "09", "0a"]


def part(device_id: str) -> Part:
    return PARTS.get(device_id.lower(), GENERIC)
