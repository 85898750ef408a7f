"""The command-line options several commands share (diagnose, chat, demo, verify, serve, mcp, eval ...), declared
once, and the exit codes of the commands that diagnose."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agent.checks.runner import DEFAULT_PARALLEL_HOSTS
from agent.executors.hosts import SPEC_HELP
from agent.reasoning.factory import KINDS

EXIT_RESOLVED, EXIT_UNRESOLVED, EXIT_BAD_INPUT = 0, 1, 2

HostOpt = Annotated[list[str] | None, typer.Option("--host", metavar="SPEC",
                                                   help=f"Host to check: {SPEC_HELP} (repeatable; default local).")]
LlmOpt = Annotated[str, typer.Option("--llm", metavar="|".join(KINDS),
                                     help="Reasoner: offline (no network) or openai (any OpenAI-compatible "
                                          "endpoint; key from AIDAI_LLM_API_KEY or OPENAI_API_KEY).")]
BaseUrlOpt = Annotated[str | None, typer.Option("--base-url", metavar="URL",
                                                help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1.")]
ModelOpt = Annotated[str | None, typer.Option("--model", metavar="NAME", help="Model name for --llm openai.")]
ProfileOpt = Annotated[str | None, typer.Option("--profile", metavar="SKU",
                                                help="SKU profile for check thresholds (default: matched to each "
                                                     "host's inventory, or derived from it).")]
DataDirOpt = Annotated[Path | None, typer.Option("--data-dir", metavar="DIR",
                                                 help="Data directory: Chroma store and saved runs (env "
                                                      "AIDAI_DATA_DIR; default: the per-user data dir).")]
ChromaUrlOpt = Annotated[str | None, typer.Option("--chroma-url", metavar="URL",
                                                  help="Chroma server http://host:port (env AIDAI_CHROMA_URL).")]
CheckpointUrlOpt = Annotated[str | None, typer.Option(
    "--checkpoint-url", metavar="URL", envvar="AIDAI_CHECKPOINT_URL",
    help="Keep run checkpoints in Postgres, postgresql://USER@HOST:PORT/DB (password in PGPASSWORD or ~/.pgpass, "
         "not in the URL); default: SQLite in the data dir.")]
KnownHostsOpt = Annotated[str | None, typer.Option("--known-hosts", metavar="FILE",
                                                   help="known_hosts for ssh:// hosts (default ~/.ssh/known_hosts).")]
TrustOpt = Annotated[bool, typer.Option("--trust-new-host-keys",
                                        help="Accept and remember unknown SSH host keys (a changed key is still "
                                             "refused).")]
KeyOpt = Annotated[str | None, typer.Option("--key", metavar="FILE",
                                            help="Private key for ssh:// hosts (default: agent, ~/.ssh).")]
TicketOpt = Annotated[Path | None, typer.Option("--ticket", metavar="PATH",
                                                help="Write the escalation ticket to PATH.md and PATH.json.")]
TICKET_FORMATS = ("md", "json", "both")
TicketFormatOpt = Annotated[str, typer.Option("--ticket-format", metavar="|".join(TICKET_FORMATS),
                                              help="Which ticket files --ticket writes (default both).")]
WebhookOpt = Annotated[str | None, typer.Option("--webhook", metavar="URL",
                                                help="POST the (redacted) ticket as JSON to URL (a ticket system's "
                                                     "webhook); a non-2xx answer is an error.")]
WebhookTemplateOpt = Annotated[Path | None, typer.Option("--webhook-template", metavar="FILE",
                                                         help="JSON body template for --webhook; strings may name "
                                                              "ticket fields as {{summary}}, {{status}}, "
                                                              "{{markdown}} ...")]
MaxChecksOpt = Annotated[int | None, typer.Option("--max-checks", metavar="N", min=1,
                                                  help="Stop the investigation after N check runs (host x check).")]
MaxWallOpt = Annotated[float | None, typer.Option("--max-wall-s", metavar="S", min=0.001,
                                                  help="Stop the investigation after S seconds of work (waiting for "
                                                       "your answers does not count).")]
PrometheusOpt = Annotated[str | None, typer.Option(
    "--prometheus", metavar="URL", envvar="AIDAI_PROMETHEUS_URL",
    help="The fleet's Prometheus (http://HOST:9090): its dcgm-exporter metrics for the hosts and the incident's "
         "window rank the hosts before any check (credentials: AIDAI_PROMETHEUS_TOKEN or AIDAI_PROMETHEUS_BASIC).")]
MaxTokensOpt = Annotated[int | None, typer.Option("--max-llm-tokens", metavar="N", min=1,
                                                  help="Stop the investigation once the LLM used N tokens.")]
MaxParallelHostsOpt = Annotated[int | None, typer.Option("--max-parallel-hosts", metavar="N", min=1,
                                                        help="Check at most N hosts at once (each with up to 4 "
                                                             f"checks at a time; default {DEFAULT_PARALLEL_HOSTS}).")]

ATTACHMENT_FLAGS = {"logs": "logs", "success": "success-logs", "telemetry": "telemetry",
                    "telemetry_baseline": "telemetry-baseline", "metrics": "metrics"}
LogsOpt = Annotated[Path | None, typer.Option("--logs", metavar="DIR", help="The job's logs (a file per node or "
                                              "rank, or torchrun's interleaved file): L4 ranks the suspicious nodes "
                                              "first.")]
SuccessLogsOpt = Annotated[Path | None, typer.Option("--success-logs", metavar="DIR", help="Logs of a successful "
                                                     "job with the same setup: L4 ignores the events they have too.")]
TelemetryOpt = Annotated[Path | None, typer.Option("--telemetry", metavar="FILE", help="Host metrics (CSV or "
                                                   "Parquet with a timestamp column): Reveal finds anomalous "
                                                   "windows against the normal learned from its start.")]
TelemetryBaselineOpt = Annotated[Path | None, typer.Option(
    "--telemetry-baseline", metavar="FILE", help="Host metrics of an earlier healthy run of the same job: Reveal "
                                                 "learns the normal from it too.")]
MetricsOpt = Annotated[Path | None, typer.Option("--metrics", metavar="CSV", help="The job's last 30 minutes of "
                                                 "minute-level metrics (cpu_util, gpu_util, net_rx_mbps, ...): "
                                                 "KAIOPS classifies the task and its priors rank the categories.")]
