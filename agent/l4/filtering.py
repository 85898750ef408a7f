"""Cross-job filtering (L4 §5.2): events frequent in successful jobs with the same setup are not failure-indicating.

The failed job's event order is untouched: filtering is a mask over template indices that the later stages apply
to their per-file sequences.
"""

from __future__ import annotations

import numpy as np

# An event is "frequent" in the normal pool when at least this fraction of the successful jobs logged it; with one
# to four successful jobs that means: any of them.
POOL_FRACTION = 0.2


def pool_fraction(success_presence: list[np.ndarray], n_templates: int) -> np.ndarray:
    """Per template, the fraction of successful jobs whose logs contain it (zeros without successful jobs)."""
    if not success_presence:
        return np.zeros(n_templates)
    stacked = np.zeros((len(success_presence), n_templates))
    for i, present in enumerate(success_presence):
        stacked[i, : len(present)] = present
    return stacked.mean(axis=0)


def keep_mask(fraction: np.ndarray, threshold: float = POOL_FRACTION) -> np.ndarray:
    """True for templates that survive the filter (all of them when there is no successful job)."""
    return fraction < threshold if fraction.any() else np.ones(len(fraction), bool)
