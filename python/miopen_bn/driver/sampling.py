"""Which channels a verification checks.

Batch norm's statistics never mix channels (spatial: one per channel; per
activation: one per (c, d, h, w)), and group norm's never mix groups, so the
float64 reference run on a subset of whole channels (whole groups) is exact
for them.  Large tensors are checked on a spread sample within an element
budget, the first and last channels always in (the last lives at the largest
offsets); ``-V 2`` checks every channel.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

# About 2 s of float64 reference and comparison on one core per direction.
DEFAULT_BUDGET = 1 << 22


class ChannelSample:
    """The picked channels, and how to cut them out of each kind of array."""

    def __init__(self, channels: int, picked: np.ndarray, channels_per_group: int = 1):
        self.channels = channels
        self.picked = picked
        self.channels_per_group = channels_per_group
        self.complete = len(picked) == channels
        self.groups = picked[::channels_per_group] // channels_per_group

    def data(self, array) -> np.ndarray:
        """Channels of a logical (N, C, ...) tensor, or of a (1, C, ...) parameter."""
        array = np.asarray(array)
        return array if self.complete else array[:, self.picked]

    def vector(self, array) -> np.ndarray:
        """Channels of a (C,) vector."""
        array = np.asarray(array)
        return array if self.complete else array[self.picked]

    def per_group(self, array) -> np.ndarray:
        """Groups of an (N, G) statistic."""
        array = np.asarray(array)
        return array if self.complete else array[:, self.groups]

    def describe(self) -> str:
        if self.complete:
            return f"all {self.channels} channels"
        unit = f", whole groups of {self.channels_per_group}" if self.channels_per_group > 1 else ""
        return f"{len(self.picked)} of {self.channels} channels{unit} (-V 2 checks all)"


def sample_channels(shape: tuple, budget: Optional[int], channels_per_group: int = 1) -> ChannelSample:
    """Whole channels (whole groups of ``channels_per_group``) of a tensor of
    ``shape``, as many as fit in ``budget`` elements (None: all), at least one
    group."""
    channels = shape[1]
    groups = channels // channels_per_group
    group_elements = int(np.prod(shape)) // groups
    count = groups if budget is None else max(1, min(groups, budget // max(group_elements, 1)))
    if count == groups:
        picked_groups = np.arange(groups)
    elif count == 1:
        picked_groups = np.array([groups - 1])
    else:
        picked_groups = np.unique(np.round(np.linspace(0, groups - 1, count)).astype(np.int64))
    picked = (picked_groups[:, None] * channels_per_group + np.arange(channels_per_group)).reshape(-1)
    return ChannelSample(channels, picked, channels_per_group)
