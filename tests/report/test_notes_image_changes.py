"""The words for the image changes adaptation checked (ldpclient.report.notes.image_changes_words)."""

from __future__ import annotations

from ldpclient.names import IMAGE_CHANGES
from ldpclient.report.notes import image_changes_words
from ldpclient.transfer.image_changes import CHANGES, KeptChanges


def test_the_kept_changes_are_said_with_the_shares_the_student_kept() -> None:
    assert list(CHANGES) == list(IMAGE_CHANGES)  # one list of names
    found = KeptChanges(("channels", "grey"), {"mirror": 0.3, "channels": 0.91, "invert": 0.5, "grey": 0.88}, 0.95, 500)
    words = image_changes_words({"image_changes": found.as_dict()})
    assert words == ("also shown with their colour channels reordered or in grey (the student kept 91%, 88% of its "
                     "labels so, 95% under a shift, of 500 images)")
    none = KeptChanges((), {"mirror": 0.3, "invert": 0.2}, 0.95, 500)
    assert image_changes_words({"image_changes": none.as_dict()}) == (
        "no larger change kept the student's labels as often as a shift (95% under a shift, of 500 images): "
        "not shown changed")
    # the views the labels of the unsure images are the mean over: the image as it is, its four one-pixel shifts,
    # the two kept changes
    words = image_changes_words({"image_changes": found.as_dict(), "label_views": 7, "labelled_through_views": 120})
    assert words is not None and words.endswith(
        "of 500 images); the 120 images the adapted student was unsure of labelled by the mean over 7 views of each")
    assert image_changes_words({"image_changes": none.as_dict(), "label_views": 1}).endswith("not shown changed")
    sure = {"image_changes": found.as_dict(), "label_views": 7, "labelled_through_views": 0}
    assert image_changes_words(sure) == words.split(";")[0]  # no image unsure, no views said


def test_nothing_is_said_where_nothing_was_checked_and_unknown_names_are_never_said() -> None:
    assert image_changes_words(None) is None
    assert image_changes_words({"image_changes": None}) is None
    assert image_changes_words({"image_changes": KeptChanges((), {}, 0.0, 0).as_dict()}) is None
    hostile = {"kept": ["\x1b[2J<script>", "mirror"], "shares": {"\x1b[2J<script>": 1.0, "mirror": 0.97},
               "shift": 0.9, "images": 200}
    words = image_changes_words({"image_changes": hostile})
    assert words is not None and words.startswith("also shown mirrored (the student kept 97%") and "\x1b" not in words
