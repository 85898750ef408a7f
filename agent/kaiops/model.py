"""The KAIOPS network (§III): per-modality encoders, per-minute fusion, segmented multi-scale convolution, Bi-GRU
and a hybrid temporal attention biased towards the last minutes. A modality can be switched off (ablations)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from agent.kaiops import CLASSES, METRICS, STEPS
from agent.kaiops.encode import DIM
from agent.kaiops.features import BLOCKS


@dataclass
class ModelConfig:
    n_hosts: int  # host-id vocabulary size, padding (0) and unknown (1) included
    use_logs: bool = True
    use_metrics: bool = True
    use_hosts: bool = True
    d_log: int = 64
    d_metric: int = 32
    d_host: int = 32
    d_seg: int = 64
    d_gru: int = 64
    heads: int = 4
    dropout: float = 0.2
    # training drops a task's whole host branch with this probability: host ids are a strong shortcut (faulty hosts
    # cluster) that otherwise crowds out what the metrics and logs say, and a new host carries no history at all
    host_dropout: float = 0.0
    # temporal context: each log line enters the minute it falls in (its position in the window), so the sequence
    # model sees when lines appear relative to the metrics. Off (an ablation): every line is pooled into the last
    # minute, a bag of lines without time
    temporal_context: bool = True

    def dict(self) -> dict:
        return asdict(self)


class TemporalBlock(nn.Module):
    """A causal dilated residual block (locuslab/TCN, MIT): conv -> chomp -> ReLU -> dropout, twice."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int, dropout: float):
        super().__init__()
        pad = (kernel - 1) * dilation
        self.pad = pad
        self.conv1 = weight_norm(nn.Conv1d(c_in, c_out, kernel, padding=pad, dilation=dilation))
        self.conv2 = weight_norm(nn.Conv1d(c_out, c_out, kernel, padding=pad, dilation=dilation))
        self.drop = nn.Dropout(dropout)
        self.down = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.drop(torch.relu(self.conv1(x)[..., :-self.pad]))
        y = self.drop(torch.relu(self.conv2(y)[..., :-self.pad]))
        return torch.relu(y + self.down(x))


class TCN(nn.Module):
    def __init__(self, c_in: int, c_out: int, levels: int = 4, kernel: int = 3, dropout: float = 0.1):
        super().__init__()  # receptive field 1 + 2(k-1)(2^L - 1) = 61 >= 30 minutes
        self.net = nn.Sequential(*[TemporalBlock(c_in if i == 0 else c_out, c_out, kernel, 2 ** i, dropout)
                                   for i in range(levels)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T, c_out)
        return self.net(x.transpose(1, 2)).transpose(1, 2)


class LogEncoder(nn.Module):
    """384-d line embeddings -> 64-d -> multi-head self-attention over the lines -> mean per minute. The
    projection runs on the table of distinct lines, then rows are gathered: the same line repeats across tasks."""

    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.proj = nn.Linear(DIM, d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=dropout, batch_first=True)
        self.norm = nn.LayerNorm(d)

    def forward(self, table: torch.Tensor, lines: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        mask = lines >= 0
        x = self.proj(table)[lines.clamp(min=0)] * mask.unsqueeze(-1)
        empty = ~mask.any(dim=1)
        pad = ~mask
        pad[empty, 0] = False  # a task without lines attends to one zero line instead of to nothing (NaN)
        y, _ = self.attn(x, x, x, key_padding_mask=pad, need_weights=False)
        x = self.norm(x + y) * mask.unsqueeze(-1)
        out = torch.zeros(x.shape[0], STEPS, x.shape[2], dtype=x.dtype, device=x.device)
        idx = steps.unsqueeze(-1).expand_as(x)
        out = out.scatter_add(1, idx, x)
        counts = torch.zeros(x.shape[0], STEPS, 1, dtype=x.dtype, device=x.device)
        counts = counts.scatter_add(1, steps.unsqueeze(-1), mask.unsqueeze(-1).to(x.dtype))
        return out / counts.clamp(min=1.0)


class SegmentedConv(nn.Module):
    """Early / mid / recent thirds of the window, each with its own convolution; smaller kernels for later
    segments, where the evidence is sharper and more local."""

    def __init__(self, c_in: int, c_out: int, kernels: tuple[int, ...] = (7, 5, 3)):
        super().__init__()
        self.kernels = kernels
        self.convs = nn.ModuleList(nn.Conv1d(c_in, c_out, k, padding=k // 2) for k in kernels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, C)
        bounds = [round(i * STEPS / len(self.convs)) for i in range(len(self.convs) + 1)]
        parts = [torch.relu(conv(x[:, a:b].transpose(1, 2))).transpose(1, 2)
                 for conv, a, b in zip(self.convs, bounds, bounds[1:], strict=False)]
        return torch.cat(parts, dim=1)


class HybridTemporalAttention(nn.Module):
    """Additive attention over time plus a learned, non-negative bias growing with position (late minutes
    count more), and a sigmoid gate over features."""

    position: torch.Tensor  # a buffer (register_buffer): nn.Module's __getattr__ would type it Tensor | Module

    def __init__(self, d: int):
        super().__init__()
        self.score = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Linear(d, 1))
        self.gate = nn.Linear(d, d)
        self.late = nn.Parameter(torch.tensor(1.0))
        self.register_buffer("position", torch.linspace(0, 1, STEPS), persistent=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (B, T, d) -> (B, d)
        logits = self.score(h).squeeze(-1) + nn.functional.softplus(self.late) * self.position
        alpha = torch.softmax(logits, dim=1).unsqueeze(-1)
        return (alpha * torch.sigmoid(self.gate(h)) * h).sum(dim=1)


class Kaiops(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d_fused = 0
        if cfg.use_logs:
            self.logs = LogEncoder(cfg.d_log, cfg.heads, cfg.dropout)
            d_fused += cfg.d_log
        if cfg.use_metrics:
            self.tcn = TCN(BLOCKS * len(METRICS), cfg.d_metric)
            d_fused += cfg.d_metric
        if cfg.use_hosts:
            self.hosts = nn.Embedding(cfg.n_hosts, cfg.d_host, padding_idx=0)
            d_fused += cfg.d_host
        if d_fused == 0:
            raise ValueError("the model needs at least one modality")
        self.seg = SegmentedConv(d_fused, cfg.d_seg)
        self.gru = nn.GRU(cfg.d_seg, cfg.d_gru, batch_first=True, bidirectional=True)
        self.attn = HybridTemporalAttention(2 * cfg.d_gru)
        self.head = nn.Sequential(nn.Dropout(cfg.dropout), nn.Linear(2 * cfg.d_gru, 64), nn.ReLU(),
                                  nn.Linear(64, len(CLASSES)))

    def forward(self, metrics: torch.Tensor, lines: torch.Tensor, line_steps: torch.Tensor, hosts: torch.Tensor,
                table: torch.Tensor) -> torch.Tensor:
        """metrics (B, T, BLOCKS * 8); lines (B, L) rows of `table` (n, 384), -1 = none; line_steps (B, L) minute of
        each line; hosts (B, H) host ids, 0 = none."""
        parts = []
        if self.cfg.use_logs:
            if not self.cfg.temporal_context:
                line_steps = torch.full_like(line_steps, STEPS - 1)
            parts.append(self.logs(table, lines, line_steps))
        if self.cfg.use_metrics:
            parts.append(self.tcn(metrics))
        if self.cfg.use_hosts:
            present = (hosts > 0).unsqueeze(-1).float()
            pooled = (self.hosts(hosts) * present).sum(1) / present.sum(1).clamp(min=1.0)
            if self.training and self.cfg.host_dropout > 0:
                keep = torch.rand(pooled.shape[0], 1, device=pooled.device) >= self.cfg.host_dropout
                pooled = pooled * keep
            parts.append(pooled.unsqueeze(1).expand(-1, STEPS, -1))
        x = self.seg(torch.cat(parts, dim=-1))
        h, _ = self.gru(x)
        return self.head(self.attn(h))
