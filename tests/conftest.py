"""Shared test configuration."""

import torch

# Two cores on CI: keep each test process from oversubscribing them.
torch.set_num_threads(1)
