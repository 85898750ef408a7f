"""L4 evaluation helpers: the simulated job set, the Error_time / Error_count baselines, and the metrics."""
