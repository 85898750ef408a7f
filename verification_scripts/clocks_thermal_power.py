#!/usr/bin/env python3
"""Clocks, thermal and power: active clock event reasons (thermal slowdown, HW power brake, HW slowdown),
temperatures vs. the profile limit, enforced power limit vs. default, and SM clocks under load
(a GPU clocking low with no throttle reason is a straggler).
"""

import checklib
import checklib_gpu

BASE = ["index", "temperature.gpu", "temperature.memory", "power.draw", "power.limit", "power.default_limit",
        "clocks.sm", "clocks.max.sm", "utilization.gpu"]
REASON_FIELDS = ["clocks_event_reasons.active", "clocks_throttle_reasons.active"]  # the latter before 535.54.03
IDLE, SW_POWER, HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, POWER_BRAKE = 0x1, 0x4, 0x8, 0x20, 0x40, 0x80
MEMORY_TEMP_LIMIT = 95
STRAGGLER_RATIO = 0.9
BUSY_PCT = 50


def query(check):
    for reason in REASON_FIELDS:
        fields = [*BASE, reason]
        cmd = check.run(["nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
        rows = [r for r in checklib.parse_query_csv(cmd.out, fields) if checklib.to_int(r["index"]) is not None]
        if rows:
            for row in rows:
                row["reasons"] = row[reason]
            return rows, None
        if "is not a valid field" not in cmd.text:
            return [], checklib_gpu.nvsmi_error(cmd) or cmd.why()
    return [], "neither clock event reason field is supported"


def body(check):
    rows, why = query(check)
    if not rows:
        check.unknown("no clock/thermal readings (%s)" % why)
    limit = check.expect("temp_limit_c")
    # a tolerance between a GPU and its own maximum or peers, not a SKU expectation: kept when the profile has none
    ratio = check.expect("straggler_ratio") or STRAGGLER_RATIO
    loaded = [checklib.to_int(r["clocks.sm"]) for r in rows
              if (checklib.to_int(r["utilization.gpu"]) or 0) >= BUSY_PCT and checklib.to_int(r["clocks.sm"])]
    median = sorted(loaded)[len(loaded) // 2] if loaded else None
    check.metrics.update({"temp_limit_c": limit, "temperature_c": {}, "sm_clock_mhz": {}, "reasons": {},
                          "power_draw_w": {}, "busy_median_sm_clock_mhz": median})
    for row in rows:
        judge(check, row, limit, ratio, median)
    check.targets = ["GPU%s" % r["index"] for r in rows]
    if not any(busy(r) for r in rows):
        # an undersized power supply brakes the GPUs only while they draw: idle ones neither show it nor clear it
        check.info("not_under_load", check.host, "no GPU is under load (utilization below %d %% and power below "
                   "half the limit): a HW power brake would not show now, so the power supply is not judged"
                   % BUSY_PCT)
    if limit is None:
        # the clock event reasons still show thermal slowdown; only the temperature itself is not compared
        check.info("temperature_not_compared", check.host, "no expectation for temp_limit_c on this host: "
                   "temperatures are reported, not compared")


def busy(row):
    util = checklib.to_int(row["utilization.gpu"]) or 0
    draw, cap = checklib.to_float(row["power.draw"]), checklib.to_float(row["power.limit"])
    return util >= BUSY_PCT or bool(draw is not None and cap and draw >= 0.5 * cap)


def judge(check, row, limit, ratio, median):
    who = "GPU%s" % row["index"]
    raw = ", ".join("%s=%s" % (f, row[f]) for f in BASE) + ", reasons=%s" % row["reasons"]
    mask = checklib.to_int(row["reasons"])
    temp, mem_temp = checklib.to_float(row["temperature.gpu"]), checklib.to_float(row["temperature.memory"])
    draw, cap = checklib.to_float(row["power.draw"]), checklib.to_float(row["power.limit"])
    default = checklib.to_float(row["power.default_limit"])
    sm, sm_max = checklib.to_int(row["clocks.sm"]), checklib.to_int(row["clocks.max.sm"])
    util = checklib.to_int(row["utilization.gpu"]) or 0
    check.metrics["temperature_c"][who] = temp
    check.metrics["sm_clock_mhz"][who] = sm
    check.metrics["reasons"][who] = row["reasons"]
    check.metrics["power_draw_w"][who] = draw
    mask = mask or 0
    thermal = mask & (HW_THERMAL | SW_THERMAL)
    if temp is not None and limit is not None and temp > limit:
        check.fail("overheating", who, "%s at %.0f C, above the %.0f C limit%s" % (
            who, temp, limit, " (thermal slowdown active)" if thermal else ""), raw)
    elif thermal:
        check.warn("thermal_slowdown", who, "%s clocks reduced by %s thermal slowdown at %s C" % (
            who, "HW" if mask & HW_THERMAL else "SW", row["temperature.gpu"]), raw)
    if mask & POWER_BRAKE:
        if busy(row):
            check.fail("power_brake", who, "%s HW power brake asserted under load (%s W of %s W, SM %s MHz): the "
                       "power supply cannot sustain the load" % (who, row["power.draw"], row["power.limit"], sm), raw)
        else:
            check.warn("power_brake", who, "%s HW power brake asserted at idle" % who, raw)
    elif mask & HW_SLOWDOWN and not thermal:
        check.warn("hw_slowdown", who, "%s HW slowdown active (reason 0x%x)" % (who, mask), raw)
    if mem_temp is not None and mem_temp > MEMORY_TEMP_LIMIT:
        check.warn("memory_hot", who, "%s HBM at %.0f C" % (who, mem_temp), raw)
    if cap and default and cap < default * 0.98:
        check.warn("power_capped", who, "%s power limit %.0f W below the default %.0f W" % (who, cap, default), raw)
    throttled = mask & (HW_SLOWDOWN | HW_THERMAL | SW_THERMAL | POWER_BRAKE | SW_POWER | IDLE)
    if util >= BUSY_PCT and sm and sm_max and not throttled:
        low_vs_max = sm < ratio * sm_max
        low_vs_peers = median is not None and sm < ratio * median
        if low_vs_max or low_vs_peers:
            check.warn("low_sm_clock", who, "%s runs at %d MHz under load (%.0f%% of max %d MHz%s) with no throttle "
                       "reason: a slow GPU" % (who, sm, 100.0 * sm / sm_max, sm_max,
                                               ", busy-GPU median %d MHz" % median if median else ""), raw)


if __name__ == "__main__":
    checklib.main("clocks_thermal_power", body)
