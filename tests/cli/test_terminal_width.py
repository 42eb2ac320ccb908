"""Terminal output at 80 columns: progress bars keep their counts and times, summaries wrap between
words on a terminal and stay one line per key in a file or a pipe."""

from __future__ import annotations

import io
import json
import re

from rich.console import Console

from ldpclient.run.ui import UI

LONG = ("the data-free run (blank queries, no privacy spent) labelled 82.2 % of the check set correctly, against "
        "83.8 % here: the private releases bought 1.6 points")


def _terminal(width: int) -> Console:
    return Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)


def test_progress_bars_keep_counts_and_times_at_80_columns() -> None:
    for width in (80, 120):
        ui = UI(console=_terminal(width))
        with ui.stage("baseline train", total=123456) as bar:
            bar.update(359, info="round 2 of 3: fine-tuning on 800 pseudo-labelled images with their anchors")
            ui._progress.refresh()  # type: ignore[union-attr]
        ui.stop_progress()
        shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", ui.console.file.getvalue())  # the live display's controls
        lines = [line.rstrip() for line in shown.splitlines() if "baseline train" in line]
        assert lines, ui.console.file.getvalue()
        last = lines[-1]
        assert len(last) <= width and "359/123456" in last and "0:00:00" in last, last
        assert last.endswith("…") and ("fine-tuning" in last) == (width > 80), last  # the words give way


def test_summaries_wrap_between_words_on_a_terminal_and_not_in_a_file() -> None:
    ui = UI(console=_terminal(80))
    ui._table("summary", [("baseline", LONG), ("money", "0.36")])
    lines = ui.console.file.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines)
    body = [line for line in lines[1:] if not line.lstrip().startswith("money")]
    assert len(body) > 1 and all(line.startswith("  baseline  ") or line.startswith(" " * 12) for line in body)
    assert " ".join(line.strip() for line in body) == f"baseline  {LONG}"  # no word cut, none lost
    piped = UI(console=Console(file=io.StringIO(), width=80, force_terminal=False, color_system=None))
    piped._table("summary", [("baseline", LONG)])
    assert f"  baseline  {LONG}" in piped.console.file.getvalue().splitlines()


def test_json_mode_keeps_stdout_for_the_one_document(capsys) -> None:
    """What a library prints on stdout during a ``--json`` run (Ray's driver prints its cluster's errors there)
    goes to stderr; the document and a JSON error line go to stdout."""
    ui = UI(quiet=True, json_mode=True)
    with ui.stdout_kept_for_json():
        print("(raylet) Task MapWorker(MapBatches(_Worker)).submit failed.")
    ui.print_json({"ok": True})
    out, err = capsys.readouterr()
    assert json.loads(out) == {"ok": True} and "(raylet)" in err
    plain = UI()
    with plain.stdout_kept_for_json():
        print("shown")
    assert capsys.readouterr().out == "shown\n"
