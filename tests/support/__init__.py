"""What the tests share, imported as ``support.<module>`` (``tests/`` is on the path through its ``conftest.py``):
servers and folders they start and write (``cli_runs``, ``transfers``, ``chat``, ``doc_examples``,
``hostile_server``, ``postgres_server``, ``image_folders``), children they fork (``fast_children`` with
``journal_child``, ``ledger_crash_child``, ``postgres_race_child``), and probes (``browser``, ``peak_rss``,
``package_copy``, ``decoding_helpers``, ``ledger_support``)."""
