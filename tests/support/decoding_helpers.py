"""Stand-ins for ``ldpclient.io.decoding.decode_files`` run inside decoding processes (tests only)."""

from __future__ import annotations

import os
import time

from ldpclient.io.decoding import decode_files


def die_on_bad(root, rels, input_shape, max_pixels, on_file=None):
    """Kill the decoding process when its run holds a file named ``die.png`` (as an out-of-memory kill would)."""
    if any(rel.endswith("die.png") for rel in rels):
        os._exit(9)
    return decode_files(root, rels, input_shape, max_pixels, on_file)


def slow(root, rels, input_shape, max_pixels, on_file=None):
    """Decode, but take 50 ms a file (so that a run can be interrupted mid-way)."""
    time.sleep(0.05 * len(rels))
    return decode_files(root, rels, input_shape, max_pixels, on_file)
