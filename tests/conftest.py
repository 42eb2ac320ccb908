"""Shared test configuration."""

import os
import tempfile

import torch

# Two cores on CI: keep each test process from oversubscribing them.
torch.set_num_threads(1)

# Library defaults write state (ledger, journal, remembered wire formats) to the user's state
# directory; tests that do not pass their own get a throw-away one instead of the user's.
os.environ.setdefault("LDPCLIENT_STATE_DIR", tempfile.mkdtemp(prefix="ldpclient-tests-"))
