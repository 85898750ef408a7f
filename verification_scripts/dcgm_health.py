#!/usr/bin/env python3
"""DCGM health: what nv-hostengine's background watches recorded (`dcgmi health -g 0 -c -j`, text as a
fallback): Failure confirms, Warning is weak evidence, per GPU and health system.

Read-only: watches are not enabled unless params set_watches is true (that changes DCGM's state).
"""

import json
import re

import checklib
import checklib_gpu

RANK = {"Healthy": 0, "Warning": 1, "Failure": 2}
ROW_RE = re.compile(r"^\| (.{0,26}?)\s*\| (.*?)\s*\|$")


def from_json(text):
    """(overall, [(entity, system, health, message)]) from dcgmi's JSON tree, or None.

    DcgmiOutputJson (DCGM 2.x-4.x): {"header": [...], "body": {"Overall Health": {"value"}, "<group>":
    {"children": {"<id>": {"value", "children": {"Errors": {"children": {"<system>": {"value",
    "overflow": [message parts]}}}}}}}}}."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return None
    body = doc.get("body") if isinstance(doc, dict) else None
    if not isinstance(body, dict):
        return None
    overall = node_of(body, "Overall Health").get("value")
    if overall is None:
        return None
    incidents = []
    for group, node in body.items():
        if group == "Overall Health":
            continue
        for entity_id, entity in children(node).items():
            if not isinstance(entity, dict):
                continue
            systems = children(node_of(children(entity), "Errors"))
            for system, detail in systems.items():
                detail = detail if isinstance(detail, dict) else {}
                overflow = detail.get("overflow") or []
                message = " ".join(str(m) for m in (overflow if isinstance(overflow, list) else [overflow]))
                incidents.append(("%s%s" % (group, entity_id), system, str(detail.get("value", "")), message))
            if not systems:
                incidents.append(("%s%s" % (group, entity_id), "", str(entity.get("value", "")), ""))
    return str(overall), incidents


def node_of(tree, key):
    node = tree.get(key) if isinstance(tree, dict) else None
    return node if isinstance(node, dict) else {}


def children(node):
    return node_of(node, "children")


def from_text(text):
    """The boxed tree: '| Overall Health | Warning |', '| -> 2 | Warning |', '|       -> PCIe system | ...'."""
    overall, incidents = None, []
    group = entity = None
    for line in text.splitlines():
        match = ROW_RE.match(line.strip())
        if not match:
            continue
        label, value = match.group(1), match.group(2)
        name = label.strip().replace("-> ", "")
        if label.startswith("Overall Health"):
            overall = value
        elif label and not label.startswith(" ") and not label.startswith("->"):
            group = name
        elif label.startswith("-> "):
            entity = "%s%s" % (group or "", name)
        elif label.strip().startswith("-> ") and name != "Errors" and entity:
            incidents.append([entity, name, value, ""])
        elif not label.strip() and incidents:
            incidents[-1][3] = (incidents[-1][3] + " " + value).strip()
    return (overall, [tuple(i) for i in incidents]) if overall else None


def body(check):
    if check.params.get("set_watches"):
        check.run(["dcgmi", "health", "-g", "0", "-s", "a"])
    cmd = check.run(["dcgmi", "health", "-g", "0", "-c", "-j"])
    if cmd.missing:
        check.unknown("dcgmi not found (DCGM not installed)")
    if "Unable to connect to host engine" in cmd.text or "unable to establish a connection" in cmd.text:
        check.unknown("nv-hostengine is not running: DCGM health watches unavailable")
    if "Health watches not enabled" in cmd.text:
        check.unknown("DCGM health watches are not enabled (dcgmi health -g 0 -s a; or params set_watches)")
    parsed = from_json(cmd.out) or from_text(cmd.out)
    if parsed is None:
        text_cmd = check.run(["dcgmi", "health", "-g", "0", "-c"])
        parsed = from_text(text_cmd.out)
    if parsed is None and cmd.refused:
        check.unknown(cmd.why())
    if parsed is None:
        check.unknown("unparseable dcgmi health output (%s)" % (cmd.why() if not cmd.ok else
                                                                 checklib.first_line(cmd.out)))
    overall, incidents = parsed
    check.metrics.update({"overall_health": overall, "incidents": len(incidents),
                          "systems": sorted(set(s for _, s, _, _ in incidents if s))})
    for entity, system, health, message in incidents:
        slug = "dcgm_" + re.sub(r"[^a-z0-9]+", "_", system.lower().replace(" system", "")).strip("_")
        text = "DCGM %s on %s: %s" % (system or "health", entity, message or health)
        if health == "Failure":
            check.fail(slug, entity, text, message)
        elif health == "Warning":
            check.warn(slug, entity, text, message)
    # DCGM's memory watch counts the same volatile ECC errors nvidia-smi does: dated by the same Xid lines
    checklib_gpu.date_gpu_findings(check, {"dcgm_memory": checklib_gpu.MEMORY_XIDS})
    if overall == "Failure" and not any(f["severity"] == "FAIL" or f["id"].endswith("_history")
                                        for f in check.findings):
        check.fail("dcgm_failure", check.host, "DCGM overall health: Failure")
    elif overall == "Warning" and not check.findings:
        check.warn("dcgm_warning", check.host, "DCGM overall health: Warning")
    elif overall not in RANK:
        check.unknown("DCGM reports overall health %r" % overall)


if __name__ == "__main__":
    checklib.main("dcgm_health", body)
