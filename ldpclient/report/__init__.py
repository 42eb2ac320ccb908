"""What a run shows: the typed run report, the words it uses, the label files, and every page."""
