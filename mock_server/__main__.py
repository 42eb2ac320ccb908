"""``python -m mock_server``: run the mock teacher until SIGINT/SIGTERM."""

import sys

from .runner import main

if __name__ == "__main__":
    sys.exit(main())
