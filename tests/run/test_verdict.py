"""The verdict on a run's labels (ldpclient.run.verdict): its statistics, its rules, the check file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ldpclient.run.check_file import CheckSet, parse_check_rows, read_check_file
from ldpclient.run.check_score import check_evidence, informative_floor, sign_test_p, wilson_interval
from ldpclient.run.verdict import (
    BOUGHT_LESS,
    BOUGHT_MORE,
    BOUGHT_NOTHING,
    DOUBTFUL,
    NOT_WORTH,
    USABLE,
    Collapse,
    accuracy_words,
    judge,
)

BALANCED = [36] * 10  # labels per class of a healthy 360-image run
ANSWERS = [400, 300, 350, 380, 420, 390, 310, 330, 560, 360]  # the teacher's answers over its queries


def test_wilson_interval_matches_the_textbook_values() -> None:
    low, high = wilson_interval(79, 100)
    assert (round(low, 4), round(high, 4)) == (0.7002, 0.8583)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == pytest.approx(1.0)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_sign_test_is_the_exact_two_sided_binomial() -> None:
    assert sign_test_p(0, 0) == 1.0
    assert math.isclose(sign_test_p(0, 6), 2 / 64)
    assert math.isclose(sign_test_p(5, 5), 1.0)
    assert sign_test_p(1, 9) == pytest.approx(2 * 11 / 1024)


def test_the_floor_is_chance_plus_a_tenth_of_the_way_to_certainty() -> None:
    assert informative_floor(10) == pytest.approx(0.19)
    assert informative_floor(2) == pytest.approx(0.55)


def test_every_label_one_class_while_the_teacher_answered_many_is_not_worth_having() -> None:
    """docs/cli.md's first example on the demo folder: all 359 labels '8', the teacher said '8' to 39 %."""
    labels = [0] * 8 + [359] + [0]
    v = judge(num_classes=10, label_counts=labels, answer_counts=[30, 20, 25, 35, 40, 30, 20, 25, 157, 18],
              class_names=[str(c) for c in range(10)])
    assert v.level == NOT_WORTH
    assert v.headline.startswith("not worth having: the labels collapsed: 100.0% of the labels are '8'")
    assert v.collapse["top_class"] == 8 and v.collapse["level"] == NOT_WORTH
    assert not [r for r in v.reasons if "no collapse" in r]  # the reasons never contradict each other
    assert any(r.startswith("accuracy not measured: nothing in this run tells") and "--check" in r for r in v.reasons)


def test_a_class_that_takes_half_the_labels_beyond_its_answers_is_doubtful() -> None:
    labels = [180, 20, 20, 20, 20, 20, 20, 20, 20, 20]
    assert Collapse.of(labels, ANSWERS).level == DOUBTFUL
    assert judge(num_classes=10, label_counts=labels, answer_counts=ANSWERS).level == DOUBTFUL


def test_labels_of_one_class_after_a_teacher_that_answered_one_class_are_doubtful() -> None:
    """quantised-rr at 20 per image on colour digits (BENCHMARKS.md): the teacher said one class to 95 % of the
    queries and 90 % of the labels followed; the collapse rule alone (teacher at most half as often) missed it."""
    labels = [900, 12, 11, 11, 11, 11, 11, 11, 11, 11]
    answers = [1900, 12, 11, 11, 11, 11, 11, 11, 11, 11]
    c = Collapse.of(labels, answers)
    assert c.level == DOUBTFUL and c.teacher_share > 0.9
    v = judge(num_classes=10, label_counts=labels, answer_counts=answers, class_names=[str(i) for i in range(10)])
    assert v.level == DOUBTFUL
    assert "the teacher answered nearly every query with one class" in v.headline
    assert Collapse.of([500, 500, 0], [900, 100, 0]).level != NOT_WORTH  # half and half: not this rule


def test_classes_the_teacher_often_gave_that_never_appear_make_the_labels_doubtful() -> None:
    labels = [72, 72, 72, 72, 72, 0, 0, 0, 0, 0]
    c = Collapse.of(labels, ANSWERS)
    assert c.missing_classes == [5, 6, 7, 8, 9] and c.level == DOUBTFUL


def test_a_healthy_run_with_nothing_to_measure_its_labels_is_doubtful_and_says_the_accuracy_was_not_measured() -> None:
    """No check set, no held-out public images: labels at chance would read the same (the residual photo
    teacher's, 14-17 % on CIFAR-10, balanced and learnt by a student that agrees with the teacher)."""
    v = judge(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS, held_out_agreement=0.7)
    assert v.level == DOUBTFUL
    assert "accuracy not measured" in v.headline and "--check" in v.headline
    assert "nothing in this run tells right labels from wrong ones" in v.headline
    assert v.check is None and accuracy_words(v.as_dict()) is None
    # held-out public images judged the student (against the teacher): usable, still saying it was not measured
    public = judge(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS, held_out_agreement=0.7,
                   public_held_out=(450, 500))
    assert public.level == USABLE and any("accuracy not measured" in r for r in public.reasons)


def test_a_student_no_better_than_the_teachers_favourite_answer_is_doubtful() -> None:
    v = judge(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS, held_out_agreement=0.14)
    assert v.level == DOUBTFUL and "learned little" in v.headline


def test_labels_equal_to_the_data_free_runs_say_the_privacy_bought_nothing() -> None:
    v = judge(
        num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS, same_as_free=0.97, public_held_out=(450, 500)
    )
    assert v.level == USABLE
    said = next(r for r in v.reasons if "bought nothing measurable" in r)
    assert "--epsilon 0" in said and "--public" in said and "--queries" in said  # and what to do about it


def _check(n: int, right: int, *, free_right: int | None = None) -> tuple[CheckSet, list[str], list[int], list[int]]:
    """A check set of ``n`` images (truth 0..9 in turn); labels right on the first ``right``; the data-free
    run's right on the first ``free_right``."""
    names = [f"img{k}.png" for k in range(n)]
    truth = [k % 10 for k in range(n)]
    labels = [t if k < right else (t + 1) % 10 for k, t in enumerate(truth)]
    free = [t if k < (free_right or 0) else (t + 1) % 10 for k, t in enumerate(truth)]
    return CheckSet(dict(zip(names, truth, strict=True))), names, labels, free


def test_the_check_set_scores_the_labels_with_a_wilson_interval() -> None:
    check, names, labels, _ = _check(100, 79)
    ev = check_evidence(check, names, labels)
    assert ev is not None and (ev.score.correct, ev.score.images) == (79, 100)
    v = judge(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS, check=ev)
    assert v.level == USABLE
    assert (
        v.headline == "usable: 79.0% right on the check set (79 of 100 hand-labelled images; 95% interval 70.0%-85.8%)"
    )
    assert accuracy_words(v.as_dict()).startswith("79.0% on the check set of 100 hand-labelled images")


def test_labels_at_chance_on_the_check_set_are_not_worth_having() -> None:
    check, names, labels, _ = _check(100, 12)
    v = judge(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS, check=check_evidence(check, names, labels))
    assert v.level == NOT_WORTH and "at chance" in v.headline


def test_a_check_set_too_small_to_tell_is_doubtful() -> None:
    check, names, labels, _ = _check(10, 3)
    v = judge(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS, check=check_evidence(check, names, labels))
    assert v.level == DOUBTFUL and "too few check images" in v.headline


def test_labels_mostly_wrong_are_doubtful_even_above_chance() -> None:
    check, names, labels, _ = _check(100, 30)
    v = judge(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS, check=check_evidence(check, names, labels))
    assert v.level == DOUBTFUL and v.headline.endswith("better than chance, but most labels are wrong")
    # 54 of 100 (interval 44-63 %; a digits run of the old docs example, 47 % true): not shown to be mostly right
    check, names, labels, _ = _check(100, 54)
    v = judge(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS, check=check_evidence(check, names, labels))
    assert v.level == DOUBTFUL and v.headline.endswith("most labels may be wrong (the interval reaches below 50.0%)")
    check, names, labels, _ = _check(100, 62)  # interval 52-71 %: usable
    v = judge(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS, check=check_evidence(check, names, labels))
    assert v.level == USABLE


def test_labels_significantly_worse_than_the_data_free_run_are_doubtful() -> None:
    check, names, labels, free = _check(100, 60, free_right=80)
    ev = check_evidence(check, names, labels, free)
    assert ev is not None and (ev.wins, ev.losses) == (0, 20)
    v = judge(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS, check=ev)
    assert v.level == DOUBTFUL and v.headline.startswith("doubtful: worse than the data-free run")
    assert v.check is not None and v.check["baseline"]["correct"] == 80


def test_no_significant_gain_over_the_data_free_run_is_said_without_lowering_the_level() -> None:
    check, names, labels, free = _check(100, 80, free_right=79)
    v = judge(
        num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS, check=check_evidence(check, names, labels, free)
    )
    assert v.level == USABLE and "no measurable gain over the data-free run" in v.reasons[1]
    # one headline: the level stays usable, and what opens the summary, the report and the page says what the
    # reasons below it say
    assert v.privacy_bought == BOUGHT_NOTHING
    assert v.standing == "usable, but the privacy bought nothing: the data-free labels are as good"
    assert v.headline.startswith(v.standing + "; 80.0% right on the check set")
    assert v.as_dict()["standing"] == v.standing and v.as_dict()["privacy_bought"] == "nothing"


def test_what_the_privacy_bought_is_stated_beside_the_level() -> None:
    """Significantly better than the data-free run: plain usable; worse: doubtful; no data-free run: not said."""
    check, names, labels, free = _check(100, 80, free_right=50)
    better = judge(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS,
                   check=check_evidence(check, names, labels, free))
    assert (better.level, better.privacy_bought, better.standing) == (USABLE, BOUGHT_MORE, USABLE)
    assert better.headline.startswith("usable: 80.0% right")
    check, names, labels, free = _check(100, 60, free_right=80)
    worse = judge(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS,
                  check=check_evidence(check, names, labels, free))
    assert (worse.level, worse.privacy_bought, worse.standing) == (DOUBTFUL, BOUGHT_LESS, DOUBTFUL)
    alone = judge(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS,
                  check=check_evidence(*_check(100, 80)[:3]))
    assert alone.privacy_bought is None and alone.standing == USABLE
    same = judge(num_classes=10, label_counts=BALANCED, answer_counts=ANSWERS, same_as_free=0.97,
                 public_held_out=(450, 500))
    assert same.privacy_bought == BOUGHT_NOTHING and same.standing.startswith("usable, but the privacy bought nothing")


def test_a_check_set_that_shows_the_labels_right_outweighs_a_collapse() -> None:
    """A folder may really hold one class: the hand labels then say so."""
    names = [f"img{k}.png" for k in range(50)]
    check = CheckSet(dict.fromkeys(names, 3))
    labels = [3] * 50
    ev = check_evidence(check, names, labels)
    v = judge(num_classes=10, label_counts=[0, 0, 0, 50, 0, 0, 0, 0, 0, 0], answer_counts=ANSWERS, check=ev)
    assert v.level == USABLE and any("check set shows the labels right" in r for r in v.reasons)


def test_check_images_missing_from_the_labels_are_counted_not_scored() -> None:
    check = CheckSet({"a.png": 1, "gone.png": 2})
    ev = check_evidence(check, ["a.png", "b.png"], [1, 0])
    assert ev is not None and ev.score.images == 1 and ev.missing == 1
    assert check_evidence(CheckSet({"gone.png": 2}), ["a.png"], [1]) is None


def test_the_check_file_takes_class_names_or_indices_with_or_without_a_header(tmp_path: Path) -> None:
    f = tmp_path / "check.csv"
    f.write_text("file,label\nsub/a.png,cat\nb.png,2\n", encoding="utf-8")
    check = read_check_file(f, ["dog", "cat", "bird"], 3)
    assert dict(check.labels) == {"sub/a.png": 1, "b.png": 2}
    f.write_text("a.png,0\n\nb.png,dog\n", encoding="utf-8")
    assert dict(read_check_file(f, ["dog", "cat"], 2).labels) == {"a.png": 0, "b.png": 0}


def test_digit_class_names_and_indices_are_never_confused(tmp_path: Path) -> None:
    """Classes named "1".."10" (class k is named str(k + 1)): a label is read as a name or an index only where the
    whole file says which, and a file whose labels read both ways is refused."""
    names, f = [str(k + 1) for k in range(10)], tmp_path / "check.csv"
    f.write_text("a.png,0\nb.png,3\nc.png,9\n")  # "0" is no name: indices
    assert dict(read_check_file(f, names, 10).labels) == {"a.png": 0, "b.png": 3, "c.png": 9}
    f.write_text("a.png,10\nb.png,3\n")  # "10" is no index: names
    assert dict(read_check_file(f, names, 10).labels) == {"a.png": 9, "b.png": 2}
    f.write_text("a.png,3\nb.png,5\n")
    with pytest.raises(ValueError, match=r"row 1: label '3' is both the class named '3' and another class's index; "
                                         r"say which .* 'file,class' .* 'file,index'"):
        read_check_file(f, names, 10)
    f.write_text("file,index\na.png,3\nb.png,5\n")
    assert dict(read_check_file(f, names, 10).labels) == {"a.png": 3, "b.png": 5}
    f.write_text("path,class\na.png,3\nb.png,5\n")
    assert dict(read_check_file(f, names, 10).labels) == {"a.png": 2, "b.png": 4}
    f.write_text("file,index\na.png,10\n")
    with pytest.raises(ValueError, match=r"label '10' is not a class index 0\.\.9"):
        read_check_file(f, names, 10)
    f.write_text("file,class\na.png,0\n")
    with pytest.raises(ValueError, match=r"label '0' is not a class name \(1, 2, 3, 4, 5, \.\.\.\)"):
        read_check_file(f, names, 10)
    # labels that read the same either way need no header; the library's Python ints are always indices
    f.write_text("a.png,cat\nb.png,1\n")
    assert dict(read_check_file(f, ["0", "1", "cat"], 3).labels) == {"a.png": 2, "b.png": 1}
    assert dict(parse_check_rows([("a.png", 3), ("b.png", "10")], names, 10).labels) == {"a.png": 3, "b.png": 9}


@pytest.mark.parametrize(("body", "message"), [
    ("a.png,7\n", r"row 1: label '7' is not a class name \(dog, cat\) or a class index 0\.\.1"),
    ("a.png,cat\na.png,dog\n", "row 2: 'a.png' is labelled twice"),
    ("a.png\n", "row 1 has 1 fields; each row is 'file,label'"),
    ("file,label\n", "holds no labelled image"),
    (",cat\n", "row 1 names no file"),
])
def test_a_bad_check_file_is_one_line_naming_the_row(tmp_path: Path, body: str, message: str) -> None:
    f = tmp_path / "check.csv"
    f.write_text(body, encoding="utf-8")
    with pytest.raises(ValueError, match=message) as info:
        read_check_file(f, ["dog", "cat"], 2)
    assert str(info.value).startswith(f"--check {str(f)!r}") and "\n" not in str(info.value)


def test_a_missing_or_binary_check_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        read_check_file(tmp_path / "none.csv", None, 10)
    f = tmp_path / "bin.csv"
    f.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match="cannot read it"):
        read_check_file(f, None, 10)


def test_held_out_public_images_judge_the_student_against_the_teacher_without_a_check_set() -> None:
    from ldpclient.run.verdict import DOUBTFUL, NOT_WORTH, USABLE, judge

    common = dict(num_classes=10, label_counts=[10] * 10, answer_counts=[10] * 10)
    assert judge(**common, public_held_out=(40, 500)).level == NOT_WORTH  # 8 %: at chance
    assert judge(**common, public_held_out=(2, 6)).level == DOUBTFUL  # too few to tell
    assert judge(**common, public_held_out=(200, 500)).level == DOUBTFUL  # most disagree
    good = judge(**common, public_held_out=(450, 500))
    assert good.level == USABLE and good.public_held_out["agreement"] == 0.9
    assert "agreement with the teacher, not accuracy" in " ".join(good.reasons)


def test_public_images_that_miss_the_queries_classes_are_named_without_lowering_the_level() -> None:
    queries = [100] * 10
    # public images of five of the ten classes the queries' answers often give, and the teacher's few errors on them
    # (MNIST's held-out zeros to fours: [47, 56, 45, 54, 43, 0, 1, 3, 1, 0], BENCHMARKS.md "Queries")
    half = [47, 56, 45, 54, 43, 0, 1, 3, 1, 0]
    labels = [10] * 10
    v = judge(num_classes=10, label_counts=labels, answer_counts=[q + p for q, p in zip(queries, half, strict=True)],
              answers_apart={"queries": queries, "public": half}, public_held_out=(450, 500))
    assert v.level == "usable"
    assert any("seldom or never gave the public images 5 of the 10 classes it often gave the "
               "queries" in r for r in v.reasons)
    every = [20] * 10
    v = judge(num_classes=10, label_counts=labels, answer_counts=[q + p for q, p in zip(queries, every, strict=True)],
              answers_apart={"queries": queries, "public": every})
    assert not any("gave the public images" in r for r in v.reasons)
    v = judge(num_classes=10, label_counts=labels, answer_counts=queries)  # no public images: nothing said
    assert not any("gave the public images" in r for r in v.reasons)
    # public images none of whose answers were counted (every one held out or refused): nothing said, no error
    v = judge(
        num_classes=10,
        label_counts=labels,
        answer_counts=queries,
        answers_apart={"queries": queries, "public": [0] * 10},
        public_held_out=(450, 500),
    )
    assert v.level == "usable" and not any("gave the public images" in r for r in v.reasons)


def test_the_pipeline_counts_the_answers_to_queries_and_to_public_images_apart() -> None:
    import torch

    from support.transfers import quadrant_records, quadrant_transfer

    x, y = quadrant_records()
    public, public_y = quadrant_records(12, seed=5)
    # public images of two of the four classes
    result = quadrant_transfer(plan=dict(num_queries=512)).run(x, public=public[public_y < 2])
    apart = result.answers_apart
    assert apart is not None and sum(apart["queries"]) == 512
    assert sum(apart["public"]) == int((public_y < 2).sum()) and apart["public"][2] == apart["public"][3] == 0
    assert sum(apart["queries"]) + sum(apart["public"]) == sum(result.teacher_label_histogram)
    assert quadrant_transfer(plan=dict(num_queries=512)).run(x).answers_apart is None
    assert torch.is_tensor(result.labels)
