"""L4 log localizer (Jiang et al., FSE'25): parse a failed training job's per-rank/per-node logs and point at the
suspicious nodes, failure-indicating events, failed stage and suspicious iterations."""
