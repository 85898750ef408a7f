"""The fleet's Prometheus as a pre-triage source: dcgm-exporter metrics for the incident's hosts and window rank
the hosts before any SSH (client.py: the HTTP API; rules.py: what each metric means; triage.py: the queries and the
ranking; tool.py: the pre-triage tool)."""
