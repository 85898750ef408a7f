#!/usr/bin/env python3
"""nccl_env: the job's NCCL/Gloo network variables against the interfaces, HCAs, GIDs and plugins present.

* NCCL_SOCKET_IFNAME (NCCL list syntax: comma list, `^` excludes, `=` exact, else prefix match) must
  select an interface that is up and has an address, else NCCL fails with "Bootstrap : no socket
  interface found"; GLOO_SOCKET_IFNAME takes exact names, each of which must be usable.
* NCCL_IB_HCA must name existing GPU-rail HCAs, not the Ethernet control-plane port.
* NCCL_IB_GID_INDEX must point at a populated RoCE v2 GID on the RoCE rails.
* NCCL_NET_PLUGIN must name a library on the loader path.
* Settings that silently take NCCL off the fabric (NCCL_IB_DISABLE=1, NCCL_NET=Socket, NCCL_P2P_DISABLE=1)
  are warnings.
"""

import json
import os

import checklib
import checklib_net

LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/lib",
            "/usr/local/lib", "/usr/lib/aarch64-linux-gnu")
WATCHED = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_NET_PLUGIN",
           "NCCL_IB_DISABLE", "NCCL_NET", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_SOCKET_FAMILY")


def nccl_list(spec):
    """NCCL's list syntax -> (names, exclude, exact); a `:port` suffix is kept apart."""
    text = spec.strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    items = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        name, _, port = part.partition(":")
        items.append((name, checklib.to_int(port) if port else None))
    return items, exclude, exact


def selects(spec, name, port=None):
    items, exclude, exact = nccl_list(spec)
    hit = any((name == item if exact else name.startswith(item)) and (want is None or port is None or want == port)
              for item, want in items)
    return hit != exclude


# ---- interfaces ---------------------------------------------------------------------------------
def interfaces(check):
    """name -> {state, addrs}; addrs is a list of (family, address, scope), or None if unknown."""
    found = {}
    for name in check.listdir("/sys/class/net"):
        state = (check.read("/sys/class/net/%s/operstate" % name) or "").strip().lower()
        found[name] = {"state": state, "addrs": None}
    cmd = check.run(["ip", "-j", "addr"])
    try:
        links = json.loads(cmd.out) if cmd.ok else []
    except ValueError:
        links = []
    for link in links if isinstance(links, list) else []:
        entry = found.setdefault(link.get("ifname", "?"), {"state": "", "addrs": None})
        entry["state"] = entry["state"] or str(link.get("operstate", "")).lower()
        entry["addrs"] = [(a.get("family"), a.get("local"), a.get("scope")) for a in link.get("addr_info", [])]
    return found


def usable(entry):
    """Up (or 'unknown', as loopback reports) with an address NCCL's getifaddrs scan would find."""
    if entry["state"] not in ("up", "unknown"):
        return False
    if entry["addrs"] is None:
        return True  # addresses unknown (no `ip`): trust the link state
    return any(fam == "inet" or (fam == "inet6" and scope == "global") for fam, _, scope in entry["addrs"])


def why_unusable(name, entry):
    if entry["state"] not in ("up", "unknown"):
        return "%s is %s" % (name, entry["state"] or "not up")
    if entry["addrs"] and all(fam == "inet6" for fam, _, _ in entry["addrs"]):
        return "%s has only an IPv6 link-local address" % name
    return "%s has no IP address" % name


def judge_socket_ifname(check, var, spec, ifs):
    if var == "GLOO_SOCKET_IFNAME":
        names = [n.strip() for n in spec.split(",") if n.strip()]
        bad = ["%s does not exist" % n if n not in ifs else why_unusable(n, ifs[n])
               for n in names if n not in ifs or not usable(ifs[n])]
        if bad:
            check.fail("gloo_ifname", var, "%s=%s: %s (Gloo: 'Unable to find address for: %s')"
                       % (var, spec, "; ".join(bad), names[0] if names else spec))
        return
    matched = [n for n in sorted(ifs) if selects(spec, n)]
    good = [n for n in matched if usable(ifs[n])]
    if not good:
        detail = "; ".join(why_unusable(n, ifs[n]) for n in matched) or "no interface %s %s" % (
            "outside" if nccl_list(spec)[1] else "named/starting with", spec.lstrip("^="))
        check.fail("socket_ifname", var, "%s=%s selects no usable interface (%s; interfaces: %s): NCCL fails "
                   "with 'Bootstrap : no socket interface found'" % (var, spec, detail, ", ".join(sorted(ifs))))
    elif all(n == "lo" or n.startswith("docker") for n in good):
        check.warn("socket_ifname_local", var, "%s=%s selects only %s, which cannot reach other hosts"
                   % (var, spec, ", ".join(good)))
    else:
        check.info("socket_ifname", var, "%s=%s -> %s" % (var, spec, ", ".join(good)))


# ---- HCAs and GIDs ------------------------------------------------------------------------------
def judge_ib_hca(check, spec, ports, data):
    items, exclude, exact = nccl_list(spec)
    devs = sorted({p["dev"] for p in ports})
    selected = [p for p in ports if selects(spec, p["dev"], p["port"])]
    rails = {(p["dev"], p["port"]) for p in data}
    rail_layer = "/".join(sorted({p["link_layer"] for p in data})) or "unknown"
    if not exclude:
        for name, _ in items:
            if not any(d == name if exact else d.startswith(name) for d in devs):
                check.fail("ib_hca_missing", name, "NCCL_IB_HCA names %s, which does not exist (HCAs: %s)"
                           % (name, ", ".join(devs)))
    for port in selected:
        if (port["dev"], port["port"]) not in rails:
            check.fail("ib_hca_not_rail", port["dev"], "NCCL_IB_HCA=%s selects %s (link layer %s), which is not a "
                       "GPU rail (rails are %s): NCCL WARN NET/IB : Unable to open device %s"
                       % (spec, port["dev"], port["link_layer"] or "non-fabric", rail_layer, port["dev"]))
        elif not checklib_net.port_up(port):
            check.warn("ib_hca_down", port["dev"], "NCCL_IB_HCA selects %s, whose port is %s/%s"
                       % (port["dev"], port["state"], port["phys_state"]))
    chosen = [p for p in selected if (p["dev"], p["port"]) in rails]
    if not chosen and not any(f["id"] == "ib_hca_missing" for f in check.findings):
        check.fail("ib_hca_none", "NCCL_IB_HCA", "NCCL_IB_HCA=%s selects no GPU rail; NCCL falls back to sockets"
                   % spec)
    elif 0 < len(chosen) < len(data):
        check.warn("ib_hca_subset", "NCCL_IB_HCA", "NCCL_IB_HCA=%s uses %d of %d GPU rails"
                   % (spec, len(chosen), len(data)))
    return chosen


def judge_gid_index(check, value, rails):
    index = checklib.to_int(value)
    roce = [p for p in rails if p["link_layer"] == "Ethernet"]
    if index is None:
        check.fail("gid_index_invalid", "NCCL_IB_GID_INDEX", "NCCL_IB_GID_INDEX=%r is not a number" % value)
        return
    if not roce:
        check.info("gid_index_ignored", "NCCL_IB_GID_INDEX", "NCCL_IB_GID_INDEX=%d has no effect on InfiniBand "
                   "rails" % index)
        return
    for port in roce:
        gid, kind = checklib_net.port_gid(check, port["dev"], port["port"], index)
        if gid is None:
            check.fail("gid_index_absent", port["dev"], "NCCL_IB_GID_INDEX=%d: GID %d is empty on %s port %s"
                       % (index, index, port["dev"], port["port"]))
        elif "v2" not in kind:
            check.fail("gid_index_not_v2", port["dev"], "NCCL_IB_GID_INDEX=%d: GID %d on %s is %s (%s), not RoCE v2"
                       % (index, index, port["dev"], kind or "of unknown type", gid))
        elif gid.startswith("fe80"):
            check.warn("gid_index_link_local", port["dev"], "NCCL_IB_GID_INDEX=%d on %s is a link-local RoCE v2 GID "
                       "(%s), not routable between subnets" % (index, port["dev"], gid))


# ---- plugin -------------------------------------------------------------------------------------
def loader_dirs(check):
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    confs = ["/etc/ld.so.conf"] + ["/etc/ld.so.conf.d/" + n for n in check.listdir("/etc/ld.so.conf.d")
                                   if n.endswith(".conf")]
    for conf in confs:
        for line in (check.read(conf) or "").splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("/"):
                dirs.append(line)
    return dirs + list(LIB_DIRS)


def judge_plugin(check, value):
    if value.lower() == "none":
        return
    names = [value] if "/" in value or value.endswith(".so") else ["libnccl-net-%s.so" % value, value]
    dirs = loader_dirs(check)
    for name in names:
        paths = [name] if name.startswith("/") else [d + "/" + name for d in dirs]
        found = next((p for p in paths if check.exists(p)), None)
        if found:
            check.info("net_plugin", "NCCL_NET_PLUGIN", "NCCL_NET_PLUGIN=%s -> %s" % (value, found))
            return
    check.fail("net_plugin_missing", "NCCL_NET_PLUGIN", "NCCL_NET_PLUGIN=%s but %s is not on the library path "
               "(LD_LIBRARY_PATH, ld.so.conf, system dirs): NCCL 'No plugin found (%s), using internal "
               "implementation'" % (value, " / ".join(names), names[0]))


def judge_fabric_switches(check, env, rails):
    fabric_up = any(checklib_net.port_up(p) for p in rails)
    if env.get("NCCL_IB_DISABLE") == "1" and fabric_up:
        check.warn("ib_disabled", "NCCL_IB_DISABLE", "NCCL_IB_DISABLE=1 keeps NCCL off the %d RDMA rails "
                   "(NET/Socket over TCP)" % len(rails))
    if env.get("NCCL_NET", "").lower() == "socket" and fabric_up:
        check.warn("net_socket", "NCCL_NET", "NCCL_NET=Socket forces TCP although RDMA rails are up")
    if env.get("NCCL_P2P_DISABLE") == "1":
        check.warn("p2p_disabled", "NCCL_P2P_DISABLE", "NCCL_P2P_DISABLE=1: GPUs exchange data through host "
                   "memory instead of NVLink/PCIe P2P")
    if env.get("NCCL_SHM_DISABLE") == "1" and env.get("NCCL_P2P_DISABLE") == "1":
        check.warn("shm_disabled", "NCCL_SHM_DISABLE", "NCCL_SHM_DISABLE=1 with P2P off: intra-node traffic "
                   "goes through the network")


def body(check):
    env = {k: os.environ[k] for k in WATCHED if os.environ.get(k, "") != ""}
    check.metrics["env"] = env
    ports = checklib_net.rdma_ports(check)
    data = checklib_net.data_ports(ports, check.profile)
    check.metrics["rails"] = [p["dev"] for p in data]
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        if var in env:
            ifs = interfaces(check)
            if not ifs:
                check.unknown("%s=%s set but no interface list is readable (/sys/class/net, ip)" % (var, env[var]))
            judge_socket_ifname(check, var, env[var], ifs)
    rails = data
    if "NCCL_IB_HCA" in env:
        if not ports:
            check.unknown("NCCL_IB_HCA=%s set but /sys/class/infiniband shows no HCA to check it against"
                          % env["NCCL_IB_HCA"])
        rails = judge_ib_hca(check, env["NCCL_IB_HCA"], ports, data)
    if "NCCL_IB_GID_INDEX" in env:
        judge_gid_index(check, env["NCCL_IB_GID_INDEX"], rails)
    if "NCCL_NET_PLUGIN" in env:
        judge_plugin(check, env["NCCL_NET_PLUGIN"])
    judge_fabric_switches(check, env, data)
    set_vars = ", ".join("%s=%s" % kv for kv in sorted(env.items())) or "no NCCL/Gloo network variables set"
    check.finish("NCCL network environment matches the host (%s)" % set_vars)


if __name__ == "__main__":
    checklib.main("nccl_env", body)
