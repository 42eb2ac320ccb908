"""``python -m ldpclient.cli``: the ``ldpclient`` command."""

from .commands import main

main()
