"""KAIOPS: a multimodal (logs, minute metrics, host placement) classifier of training-task anomalies into
Normal/Software/Performance/Network/Hardware, a simulator of such tasks, baselines, and knowledge-graph RCA."""

CLASSES: tuple[str, ...] = ("Normal", "Software", "Performance", "Network", "Hardware")
METRICS: tuple[str, ...] = ("cpu_util", "mem_util", "gpu_util", "gpu_mem_util", "net_rx_mbps", "net_tx_mbps",
                            "disk_read_mbps", "disk_write_mbps")
STEPS = 30  # minute-level samples before the event
EPOCHS = 30  # training epochs of the shipped recipe (train, eval and the CLI default to it)


class KaiopsError(ValueError):
    """Bad input for KAIOPS: an unreadable task file or metrics CSV, a missing or corrupt checkpoint."""
