"""network faults and noise for simulated hosts."""

from __future__ import annotations
