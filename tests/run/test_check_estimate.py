"""The accuracy estimate of the check set, adjusted by the confidences of all labels (ldpclient.run.check_estimate)."""

from __future__ import annotations

import math
import random
import statistics

from ldpclient.run.check_estimate import (
    CONFIDENCE_ADJUSTED,
    MAX_GAIN,
    MIN_ADJUSTED,
    SHARE_ALONE,
    estimate_accuracy,
)
from ldpclient.run.check_file import CheckSet
from ldpclient.run.check_score import Z95, check_evidence
from ldpclient.run.verdict import judge


def _population(n: int, seed: int) -> tuple[list[float], list[bool]]:
    """Labels whose confidence goes with being right: each is right with its confidence's chance (calibrated)."""
    rng = random.Random(seed)
    conf = [rng.betavariate(1.5, 0.6) for _ in range(n)]
    return conf, [rng.random() < c for c in conf]


def _draws(conf: list[float], right: list[bool], size: int, times: int, seed: int) -> list:
    rng = random.Random(seed)
    out = []
    for _ in range(times):
        idx = rng.sample(range(len(conf)), size)
        out.append(estimate_accuracy([right[k] for k in idx], [conf[k] for k in idx], conf, Z95))
    return out


def test_the_adjusted_estimate_is_unbiased_closer_than_the_share_and_its_interval_holds_the_truth() -> None:
    conf, right = _population(2000, seed=0)
    truth = sum(right) / len(right)
    adjusted = _draws(conf, right, 100, 400, seed=1)
    alone = [estimate_accuracy([right[k] for k in idx], None, None, Z95)
             for idx in (random.Random(1 + i).sample(range(2000), 100) for i in range(400))]
    assert {e.method for e in adjusted} == {CONFIDENCE_ADJUSTED} and {e.method for e in alone} == {SHARE_ALONE}
    rmse = [math.sqrt(statistics.fmean((e.accuracy - truth) ** 2 for e in es)) for es in (adjusted, alone)]
    assert abs(statistics.fmean(e.accuracy for e in adjusted) - truth) < 0.005  # unbiased (its sd / sqrt(400): 0.1 pt)
    assert rmse[0] < 0.88 * rmse[1]  # the confidences are worth more check images (expected: 0.82)
    assert sum(e.low <= truth <= e.high for e in adjusted) >= 0.92 * len(adjusted)
    assert all(e.low <= e.accuracy <= e.high and 100 < e.effective_images <= MAX_GAIN * 100 for e in adjusted)


def test_confidences_unrelated_to_being_right_leave_the_estimate_unbiased() -> None:
    rng = random.Random(3)
    conf = [rng.random() for _ in range(2000)]
    right = [rng.random() < 0.7 for _ in range(2000)]
    truth = sum(right) / len(right)
    adjusted = _draws(conf, right, 100, 300, seed=4)
    assert abs(statistics.fmean(e.accuracy for e in adjusted) - truth) < 0.01
    assert sum(e.low <= truth <= e.high for e in adjusted) >= 0.9 * len(adjusted)


def test_the_share_alone_below_thirty_images_without_confidences_or_when_they_do_not_vary() -> None:
    conf, right = _population(500, seed=5)
    few = estimate_accuracy(right[: MIN_ADJUSTED - 1], conf[: MIN_ADJUSTED - 1], conf, Z95)
    assert few.method == SHARE_ALONE and few.accuracy == sum(right[: MIN_ADJUSTED - 1]) / (MIN_ADJUSTED - 1)
    assert few.effective_images == MIN_ADJUSTED - 1
    assert estimate_accuracy(right[:100], conf[:100], None, Z95).method == SHARE_ALONE
    assert estimate_accuracy(right[:100], [0.9] * 100, [0.9] * 500, Z95).method == SHARE_ALONE
    assert estimate_accuracy(right[:100], conf[:100], [float("nan")] * 500, Z95).method == SHARE_ALONE
    every = estimate_accuracy([True] * 100, conf[:100], conf, Z95)  # all right: nothing to adjust
    assert every.method == SHARE_ALONE and every.accuracy == 1.0


def test_an_adjusted_estimate_counts_more_images_than_the_check_set_whenever_it_is_kept() -> None:
    # 40 check images at 70 % whose confidences sit well below the other labels': the adjustment moves the estimate
    # to 88 %, with a variance just below the share's own. Counted at 88 % that variance was worth 20 images ("as
    # precise as 20 check images alone" for 40); as a ratio of the two variances it is worth just over 40.
    rng = random.Random(7)
    conf = [rng.random() for _ in range(40)]
    right = [rng.random() < 0.5 + 0.45 * c for c in conf]
    everyone = conf + [rng.random() * 0.3 + 0.7 for _ in range(200)]
    estimate = estimate_accuracy(right, conf, everyone, Z95)
    share = estimate_accuracy(right, None, None, Z95)
    assert estimate.method == CONFIDENCE_ADJUSTED and share.accuracy == 0.7 and estimate.accuracy > 0.85
    assert 40 < estimate.effective_images < 41
    conf_all, right_all = _population(2000, seed=0)
    for e in _draws(conf_all, right_all, 60, 200, seed=9):
        assert e.method == SHARE_ALONE or e.effective_images > 60


def test_the_verdict_says_when_its_accuracy_was_adjusted_by_the_confidences() -> None:
    conf, right = _population(600, seed=6)
    labels = [1 if r else 0 for r in right]  # truth: every image is class 1
    names = [str(k) for k in range(600)]
    check = CheckSet({str(k): 1 for k in range(0, 600, 6)})  # 100 check images
    ev = check_evidence(check, names, labels, confidences=conf)
    assert ev is not None and ev.score.method == CONFIDENCE_ADJUSTED and ev.score.images == 100
    v = judge(num_classes=2, label_counts=[labels.count(0), labels.count(1)], answer_counts=[300, 300], check=ev)
    assert "adjusted by the confidences of all labels: as precise as" in v.reasons[0]
    assert v.check is not None and v.check["method"] == CONFIDENCE_ADJUSTED
    plain = check_evidence(check, names, labels)
    assert plain is not None and plain.score.method == SHARE_ALONE
    assert plain.score.accuracy == plain.score.correct / 100 and ev.score.correct == plain.score.correct


def test_a_label_run_scores_its_check_set_with_the_confidences_of_all_its_labels(tmp_path) -> None:
    """The run's verdict is the estimate made from the labels and confidences it returns (the wiring of
    label_report: the check images' confidences and every label's)."""
    import torch

    import ldpclient
    import mock_server

    x = torch.rand(48, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    options = dict(epsilon=20, queries=96, epochs=1, state_dir=tmp_path / "s", seed=0)
    with mock_server.serve(model="trivial", image_size=8, channels=1) as srv:
        first = ldpclient.label(x, srv.model_url, **options)
        # hand labels that disagree with the run's labels on the 14 check images it is least sure of (the same run
        # again writes the same labels)
        unsure = set(sorted(range(40), key=lambda k: float(first.confidences[k]))[:14])
        truth = {str(k): int(first.labels[k]) + (k in unsure) for k in range(40)}
        result = ldpclient.label(x, srv.model_url, check=truth, **options)
    assert torch.equal(result.labels, first.labels)
    labels, conf = result.labels.tolist(), result.confidences.tolist()
    want = estimate_accuracy([labels[k] == truth[str(k)] for k in range(40)], conf[:40], conf, Z95)
    got = result.verdict.check
    assert got is not None and got["images"] == 40 and got["correct"] == 26 and got["method"] == want.method
    assert got["accuracy"] == want.accuracy and (got["low"], got["high"]) == (want.low, want.high)
    assert want.method == CONFIDENCE_ADJUSTED and want.effective_images > 40


def test_a_wide_interval_says_how_many_check_images_would_narrow_it_to_five_points() -> None:
    names = [str(k) for k in range(400)]
    labels = [0] * 400
    wide = check_evidence(CheckSet({str(k): 0 if k % 5 else 1 for k in range(100)}), names, labels)  # 80 of 100
    assert wide is not None
    middle = (wide.score.low + wide.score.high) / 2  # 78.9 %: Wilson's interval leans to the middle
    assert wide.score.images_for(0.05) == math.ceil(Z95**2 * middle * (1 - middle) / 0.05**2) == 256
    v = judge(num_classes=2, label_counts=[300, 100], answer_counts=[200, 200], check=wide)
    assert "either side: about 256 hand-labelled images would narrow it to 5" in " ".join(v.reasons)
    assert v.reasons[0].startswith("80.0% right on the check set")  # the deciding reason stays first
    narrow = check_evidence(CheckSet({str(k): 0 if k % 50 else 1 for k in range(400)}), names, labels)  # 392 of 400
    v = judge(num_classes=2, label_counts=[300, 100], answer_counts=[200, 200], check=narrow)
    assert not any("either side" in r for r in v.reasons)
