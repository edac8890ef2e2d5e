"""One call that makes a test's randomness repeatable."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and torch (CPU and every CUDA device) with ``seed``."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
