"""The release decoder (``--decode``): made from public images only, sent only where the teacher's answers say
it helps, and never a step of the privacy accounting."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
import torch

from ldpclient.privacy import gaussian as gaussian_mechanism
from ldpclient.privacy import laplace
from ldpclient.transfer.augment import QueryPlan
from ldpclient.transfer.decode_check import MIN_CLASS_ANSWERS, decode_verdict, decoding_note
from ldpclient.transfer.decoder import decodable, decoder_key, fit_decoder
from ldpclient.transfer.decoder_store import public_split
from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.result_cache import ResultCache
from ldpclient.transfer.settings import PlanSettings, TrainingSettings
from support.transfers import quadrant_records, quadrant_teacher


def _mechanism():
    return laplace(5.0, per="record", basis="dct", coefficients=16)


def _transfer(decode: str, cache: Path | None = None, **plan) -> KnowledgeTransfer:
    return KnowledgeTransfer(
        quadrant_teacher(), _mechanism(), seed=0, release_generator=torch.Generator().manual_seed(7),
        plan=PlanSettings(augment="sup", num_queries=400, decode=decode, **plan),
        training=TrainingSettings(epochs=1, batch_size=64, device="cpu", student_kwargs={"width": 8}),
        result_cache=ResultCache(cache, "data") if cache is not None else None)


def test_a_decoder_is_a_function_of_the_public_images_the_mechanism_and_the_seed() -> None:
    public, _ = quadrant_records(64, seed=1)
    first = fit_decoder(_mechanism(), public, seed=3)
    again = fit_decoder(_mechanism(), public, seed=3)
    assert torch.equal(first.coefficients, again.coefficients) and first.scale == again.scale
    assert first.norm == "l1" and first.scale == pytest.approx(2 * _mechanism().reconstruction((1, 8, 8)).clip_norm
                                                                / 5.0, rel=0.15)  # Laplace b = 2C / epsilon
    assert decoder_key(_mechanism(), public, 3) == decoder_key(_mechanism(), public.clone(), 3)
    assert decoder_key(_mechanism(), public, 3) != decoder_key(_mechanism(), public, 4)
    assert decoder_key(_mechanism(), public, 3) != decoder_key(laplace(6.0, per="record", basis="dct",
                                                                       coefficients=16), public, 3)
    release = _mechanism().release(public[:4], generator=torch.Generator().manual_seed(0))
    decoded = first.decoded(release)
    assert decoded.values.shape == (4, 1, 8, 8) and decoded.guarantee == release.guarantee
    assert float(decoded.values.min()) >= 0 and float(decoded.values.max()) <= 1  # in the domain
    assert torch.equal(decoded.values, again.decoded(release).values)


def test_a_release_close_to_a_public_image_decodes_to_it() -> None:
    public, _ = quadrant_records(64, seed=1)
    sharp = laplace(500.0, per="record", basis="dct", coefficients=16)  # little noise: one image is far likelier
    decoder = fit_decoder(sharp, public, seed=0)
    release = sharp.release(public[:8], generator=torch.Generator().manual_seed(1))
    decoded = decoder.decoded(release).values
    nearest = torch.cdist(decoded.flatten(1), public.flatten(1)).argmin(1)
    assert torch.equal(nearest, torch.arange(8))
    gaussian = fit_decoder(gaussian_mechanism(50.0, 1e-5, per="record", basis="dct", coefficients=16), public, seed=0)
    assert gaussian.norm == "l2" and gaussian.scale > 0


def test_only_releases_in_a_basis_of_small_records_are_decoded() -> None:
    assert decodable(_mechanism(), (1, 8, 8)) is None
    assert "pixels" in str(decodable(laplace(5.0, per="record"), (1, 8, 8)))
    assert "values" in str(decodable(laplace(5.0, per="record", basis="dct", coefficients=16), (3, 128, 128)))


def test_a_plan_without_a_decoder_keeps_its_batch_ids_and_one_with_a_decoder_has_others() -> None:
    plan = QueryPlan("sup", 50, num_queries=100, seed=3, batch_size=32)
    old = hashlib.sha256(b"ldpclient.QueryPlan.v1" + json.dumps(
        {k: v for k, v in asdict(plan).items() if k != "decoder"}, sort_keys=True).encode()).hexdigest()[:16]
    assert plan.fingerprint == old  # journals written before decoders existed answer the same plans
    assert replace(plan, decoder="abc").batch_id(0) != plan.batch_id(0)


def _labels(*rows: list[int]) -> list[np.ndarray]:
    return [np.asarray(r) for r in rows]


def test_the_check_chooses_a_decoder_the_teacher_reads_clearly_better_on_every_class() -> None:
    clean = np.repeat(np.arange(4), 25)
    raw = np.where(np.arange(100) % 2 == 0, clean, (clean + 1) % 4)  # half right
    decoded = np.where(np.arange(100) % 10 == 0, (clean + 1) % 4, clean)  # nine in ten right
    private = np.tile(np.arange(4), 50)
    verdict = decode_verdict(clean, raw, decoded, private, private)
    assert verdict.chosen and verdict.decoded_agreement == 0.9 and verdict.raw_agreement == 0.5
    assert verdict.records == 200 and verdict.private_kept == 1.0
    assert "90% of 100 public images" in decoding_note({**verdict.as_dict(), "public_images": 300})


def test_the_check_refuses_a_gain_within_the_spread_or_a_class_that_loses() -> None:
    clean = np.repeat(np.arange(4), 25)
    raw = clean.copy()
    raw[:30] = (clean[:30] + 1) % 4
    slightly = raw.copy()
    slightly[:2] = clean[:2]  # two more right: 2 points, not clearly more
    verdict = decode_verdict(clean, raw, slightly)
    assert not verdict.chosen and "not clearly more" in verdict.reason
    worse_on_three = clean.copy()  # 30 more right overall, but 10 of class 3 (ids 75-99) wrong where raw was right
    worse_on_three[75:85] = 0
    verdict = decode_verdict(clean, raw, worse_on_three)
    assert not verdict.chosen and "class 3" in verdict.reason


def test_the_check_refuses_a_decoder_that_erases_a_class_of_the_private_releases() -> None:
    clean = np.repeat(np.arange(2), 50)  # public images of classes 0 and 1 only
    raw = np.where(np.arange(100) % 2 == 0, clean, 1 - clean)
    decoded = clean.copy()  # perfect on the public images
    private_raw = np.tile(np.arange(4), 50)  # the private releases hold four classes
    private_decoded = private_raw % 2  # classes 2 and 3 drawn as 0 and 1
    verdict = decode_verdict(clean, raw, decoded, private_raw, private_decoded)
    assert not verdict.chosen and "class 2" in verdict.reason and verdict.decoded_agreement == 1.0
    few = private_raw.copy()
    few[few == 3] = 0
    few[:MIN_CLASS_ANSWERS - 1] = 3  # too few raw answers of class 3 to judge its loss
    kept = few.copy()
    kept[few == 3] = 0
    assert decode_verdict(clean, raw, decoded, few, kept).chosen


def test_the_check_refuses_a_decoder_that_changes_the_private_answers_more_than_the_public_ones() -> None:
    clean = np.repeat(np.arange(4), 25)
    raw = np.where(np.arange(100) % 2 == 0, clean, (clean + 1) % 4)
    decoded = clean.copy()  # keeps the raw answer on half the public images
    private_raw = np.tile(np.arange(4), 50)
    private_decoded = np.roll(private_raw, 1)  # keeps it on none: something else than the public images
    verdict = decode_verdict(clean, raw, decoded, private_raw, private_decoded)
    assert not verdict.chosen and "do not look like the private ones" in verdict.reason
    assert verdict.public_kept == 0.5 and verdict.private_kept == 0.0


def test_a_run_decodes_only_what_it_can_and_says_why_not() -> None:
    x, _ = quadrant_records(60)
    public, _ = quadrant_records(100, seed=1)
    result = _transfer("auto").run(x, public=public)
    assert result.decoding == {"asked": True, "chosen": False,
                               "reason": "a decoder decodes into 200 public images or more (--public)"}
    assert "decode_check_queries" not in result.counts
    pixels = KnowledgeTransfer(quadrant_teacher(), laplace(5.0, per="record"), seed=0,
                               plan=PlanSettings(num_queries=200, decode="always"))
    assert "pixels" in pixels.resolved(x, public).decoding.note
    assert _transfer("none").run(x, public=public).decoding is None
    with pytest.raises(ValueError, match="decode must be one of"):
        PlanSettings(decode="sometimes")


def test_a_decoded_run_sends_decoded_releases_its_decoder_never_sees_a_private_image(tmp_path: Path) -> None:
    public, _ = quadrant_records(240, seed=1)
    runs = []
    for seed in (0, 5):  # two different private folders, the same public images
        x, _ = quadrant_records(60, seed=seed)
        result = _transfer("always", tmp_path / f"state{seed}").run(x, public=public)
        assert result.decoding is not None and result.decoding["chosen"] is True
        assert result.decoding["public_images"] == 240
        runs.append(result)
    first, second = runs
    assert first.decoding == second.decoding  # the same decoder, whichever private images the run was given
    plain = _transfer("none").run(quadrant_records(60, seed=0)[0], public=public)
    assert first.guarantee == plain.guarantee  # decoding is post-processing: the same epsilon
    assert first.plan is not None and plain.plan is not None
    assert first.plan.fingerprint != plain.plan.fingerprint and first.plan.decoder == first.decoding["decoder"]
    assert plain.plan.decoder == ""
    split = public_split(public, 0)
    decoder = fit_decoder(_mechanism(), public[split.prior], seed=split.seed)  # from the public images alone
    assert first.decoding["decoder"] == decoder_key(_mechanism(), public[split.prior], split.seed)
    release = _mechanism().release(quadrant_records(60, seed=0)[0], generator=torch.Generator().manual_seed(7))
    sample = first.sent_sample
    assert sample is not None and sample.releases.shape == (len(sample.release_indices), 1, 8, 8)
    expected = decoder.decoded(release[torch.from_numpy(sample.release_indices)]).values
    assert torch.allclose(sample.releases, expected, atol=1e-6)  # what the queries are made from: decoded


def test_a_rerun_names_the_same_decoder_and_keeps_its_verdict(tmp_path: Path) -> None:
    public, _ = quadrant_records(240, seed=1)
    x, _ = quadrant_records(60, seed=0)
    first = _transfer("auto", tmp_path).run(x, public=public)
    again = _transfer("auto", tmp_path).run(x, public=public)
    assert first.decoding is not None and again.decoding == first.decoding
    (verdict,) = (tmp_path / "decoders").iterdir()
    assert verdict.name.startswith(str(first.decoding["decoder"])) and verdict.suffix == ".json"
    assert first.counts["decode_check_queries"] == 2 * (60 + 60)  # a quarter of 240 public images, 60 records


def test_label_decode_auto_asks_the_teacher_and_says_what_it_chose(tmp_path: Path) -> None:
    import json
    import re

    from PIL import Image
    from typer.testing import CliRunner

    import mock_server
    from ldpclient.cli.commands import app

    def folder(root: Path, n: int, seed: int) -> Path:
        rng = np.random.default_rng(seed)
        root.mkdir(parents=True)
        for k in range(n):
            Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(root / f"{root.name}{k:03d}.png")
        return root

    private, public = folder(tmp_path / "private", 20, 0), folder(tmp_path / "public", 200, 1)
    args = ["label", str(private), "--public", str(public), "--epsilon", "50", "--queries", "100", "--epochs", "1",
            "--state-dir", str(tmp_path / "state"), "--output", str(tmp_path / "labels.csv")]
    with mock_server.serve(model="trivial", image_size=8, channels=1) as srv:
        res = CliRunner().invoke(app, [*args, "--teacher", srv.model_url, "--decode", "auto", "--html"],
                                 env={"COLUMNS": "200"})
        billed = srv.usage()["total"]["images"]
        wrong = CliRunner().invoke(app, [*args, "--teacher", srv.model_url, "--decode", "sometimes"])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "labels.report.json").read_text())
    decoding = report["decoding"]
    assert decoding["asked"] is True and isinstance(decoding["chosen"], bool) and decoding["images"] == 50
    assert decoding["records"] == 20 and decoding["public_images"] == 150
    assert report["counts"]["decode_check_queries"] == 2 * (50 + 20)
    assert billed == report["queries"]["sent"]  # the check's queries are sent and counted like any other
    assert re.search(r"decoding +releases sent (decoded|as they are)", res.output)
    assert "140 for the decoder check" in res.output
    page = (tmp_path / "labels.html").read_text()
    assert "decoding (--decode)" in page and "the check sent 140 queries" in page
    assert wrong.exit_code == 2 and "sometimes" in wrong.output


def test_a_refused_decoder_leaves_the_run_as_it_would_be_without_one() -> None:
    x, _ = quadrant_records(60, seed=0)
    pool, classes = quadrant_records(1200, seed=1)
    public = pool[classes == 0][:240]  # public images of one class of four: the decoder draws everything as it
    refused = _transfer("auto").run(x, public=public)
    plain = _transfer("none").run(x, public=public)
    assert refused.decoding is not None and refused.decoding["chosen"] is False
    assert "less than a fifth as many private releases" in str(refused.decoding["reason"])
    assert refused.plan is not None and plain.plan is not None and refused.plan.fingerprint == plain.plan.fingerprint
    assert torch.equal(refused.labels, plain.labels)  # the same queries, answers and training: the same labels
    assert refused.counts["queries"] == plain.counts["queries"]
