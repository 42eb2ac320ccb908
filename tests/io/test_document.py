"""`ldpclient.io.document`: a JSON document's values read as the types a reader needs, or one line naming the key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import pytest

from ldpclient.io.document import (
    integer,
    integer_or_none,
    items,
    number,
    number_or_none,
    rows,
    section,
    section_or_none,
    text,
    typed_fields,
)

DOC = {"n": 3, "x": 0.5, "whole": 4.0, "name": "a", "flag": True, "none": None, "part": {"k": 1}, "empty": {},
       "list": [1, 2], "rows": [{"a": 1}, {"a": 2}]}


def test_each_reader_returns_its_type() -> None:
    assert number(DOC, "n") == 3.0 and isinstance(number(DOC, "n"), float)
    assert integer(DOC, "n") == 3 and integer(DOC, "whole") == 4
    assert text(DOC, "name") == "a" and text(DOC, "none", "dflt") == "dflt"
    assert section(DOC, "part") == {"k": 1}
    assert section_or_none(DOC, "empty") is None and section_or_none(DOC, "missing") is None
    assert number_or_none(DOC, "none") is None and integer_or_none(DOC, "missing") is None
    assert items(DOC, "list") == [1, 2] and items(DOC, "missing") == []
    assert rows(DOC, "rows") == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize(("read", "key", "message"), [
    (number, "name", "'name' must be a number, got str 'a'"),
    (number, "flag", "'flag' must be a number, got bool"),
    (integer, "x", "'x' must be an integer, got float"),
    (text, "n", "'n' must be a string, got int"),
    (section, "list", "'list' must be an object, got list"),
    (rows, "list", "'list' must be an object, got int"),
    (items, "part", "'part' must be an array, got dict"),
    (number, "missing", "'missing' must be a number, got NoneType"),
])
def test_a_value_of_another_type_is_one_line_naming_the_key(read: object, key: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        read(DOC, key)  # type: ignore[operator]
    assert message in str(err.value) and "\n" not in str(err.value)


@dataclass(frozen=True)
class _Fields:
    count: int
    share: float
    name: Optional[str]
    counts: list[int]
    shares: Mapping[str, float]
    free: Optional[dict[str, object]] = None


def test_typed_fields_checks_each_field_against_its_type() -> None:
    good = {"count": 2, "share": 1, "name": None, "counts": [1, 2], "shares": {"a": 0.5}, "free": {"x": [1]},
            "other": "left out"}
    assert typed_fields(_Fields, good, "here") == {k: v for k, v in good.items() if k != "other"}
    for key, value in (("count", 2.5), ("count", False), ("share", "1"), ("name", 3), ("counts", [1, "2"]),
                       ("shares", {"a": "x"}), ("free", [1])):
        with pytest.raises(ValueError, match=f"here: key '{key}' must be"):
            typed_fields(_Fields, {**good, key: value}, "here")
