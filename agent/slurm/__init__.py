"""Slurm: the nodes (and GPUs) a job ran on as SSH hosts, and operator-approved drain/resume of a node.

scontrol.py runs Slurm's own commands (argument lists, timeouts) and parses their `key=value` output; jobs.py
turns a job into its nodes, addresses and GPU indices; drain.py drains and resumes a node behind a circuit breaker
and the audit log.
"""
