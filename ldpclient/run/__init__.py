"""What the commands do (label, noise, budget, demo, audit), usable without the CLI.

Importing this package is cheap (no torch): ``ldpclient --help`` relies on it.
"""
