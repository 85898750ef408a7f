"""What identifies the machine to a passive inventory: DMI (/sys/class/dmi/id) and /proc/cpuinfo.

A VM's CPUs carry the `hypervisor` flag (CPUID leaf 1, ECX bit 31, which every hypervisor sets and Linux
prints in cpuinfo); DMI names the provider's platform: "Microsoft Corporation" / "Virtual Machine" on
Hyper-V (Azure), "Amazon EC2" / the instance type on EC2, QEMU's defaults on plain KVM guests.
"""

from __future__ import annotations

from agent.sim.state import HostState

DMI = "/sys/class/dmi/id"
FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht "
         "syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology cpuid tsc_known_freq pni pclmulqdq "
         "ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand")
FLAGS_TAIL = "lahf_lm abm 3dnowprefetch ssbd ibrs ibpb stibp fsgsbase bmi1 avx2 smep bmi2 erms invpcid avx512f"


def files(host: HostState) -> dict[str, str | None]:
    machine = host.machine
    return {
        f"{DMI}/sys_vendor": machine.sys_vendor + "\n",
        f"{DMI}/product_name": machine.product_name + "\n",
        "/proc/cpuinfo": cpuinfo(host),
    }


def cpuinfo(host: HostState) -> str:
    machine = host.machine
    vendor = "AuthenticAMD" if "AMD" in machine.cpu_model.upper() else "GenuineIntel"
    flags = FLAGS + (" hypervisor " if machine.is_vm else " ") + FLAGS_TAIL
    threads = 2 if machine.smt else 1
    per_socket = max(machine.cpus // max(host.numa_nodes, 1), 1)
    blocks = []
    for cpu in range(machine.cpus):
        core = cpu % (machine.cpus // threads)
        blocks.append(f"processor\t: {cpu}\nvendor_id\t: {vendor}\nmodel name\t: {machine.cpu_model}\n"
                      f"physical id\t: {core * threads // per_socket}\nsiblings\t: {per_socket}\n"
                      f"core id\t\t: {core % (per_socket // threads or 1)}\ncpu cores\t: {per_socket // threads}\n"
                      f"flags\t\t: {flags}\n")
    return "\n".join(blocks) + "\n"
