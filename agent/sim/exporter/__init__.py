"""The simulator's dcgm-exporter: each simulated host's GPUs served over HTTP in dcgm-exporter's Prometheus
exposition (its metric names, types, help strings and labels; sources in SOURCES.md), values from the host's
state. `aidai sim exporter DIR` starts one listener per host."""
