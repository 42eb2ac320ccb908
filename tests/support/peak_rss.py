"""Run the ldpclient CLI in a fresh process and read that process's own peak RSS (tests and benchmarks).

``VmHWM`` is the peak of this process image alone; ``ru_maxrss`` would carry the parent's RSS at
fork across ``exec`` (a client started from a 1.4 GB test run would report 1.4 GB).
"""

from __future__ import annotations

import re
import sys

#: ``[sys.executable, "-c", CLI_WITH_PEAK_RSS, <ldpclient arguments>...]``: prints ``PEAK_RSS_KB <n>`` last on stderr.
CLI_WITH_PEAK_RSS = """
import re, sys
from ldpclient.cli.commands import app
try:
    app(sys.argv[1:])
finally:
    status = open("/proc/self/status").read()
    print("PEAK_RSS_KB", re.search(r"VmHWM:\\s+(\\d+)", status).group(1), file=sys.stderr)
"""


def cli_command(*args: str) -> list[str]:
    """The argv that runs ``ldpclient <args>`` and reports its peak RSS."""
    return [sys.executable, "-c", CLI_WITH_PEAK_RSS, *args]


def peak_rss_kb(stderr: str) -> int:
    """The peak RSS (KiB) the child printed; raises ValueError when it printed none."""
    found = re.findall(r"PEAK_RSS_KB (\d+)", stderr)
    if not found:
        raise ValueError(f"no peak RSS line in the child's stderr: {stderr[-300:]!r}")
    return int(found[-1])


def without_peak_line(stderr: str) -> str:
    """The child's stderr without the peak RSS line."""
    return "\n".join(line for line in stderr.splitlines() if not line.startswith("PEAK_RSS_KB"))
