"""One resolved plan per label run (ldpclient.run.plan): `label --dry-run` prints it and spends nothing, the report
keeps it, and resolving it in one place changed no label (pinned against the code before the plan existed)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import ldpclient
import mock_server
from ldpclient.cli.commands import app
from ldpclient.privacy.ledger import Ledger
from support.image_folders import plan_folders

# The SIDP labels and the query plans of the calls below (seed 7), pinned.
PINNED_SIDP_LABELS = [3, 3, 4, 4, 3, 4, 2, 4, 3, 4, 4, 3, 4, 3, 4, 4, 3, 3, 3, 3, 4, 3, 3, 3, 3, 3, 3, 4, 3, 2]
PINNED_LDPKIT_PLAN = {"batch_size": 256, "blank_fraction": 0.0, "kind": "sup", "n": 30, "n_blank": 0,
                      "num_queries": 300, "rand_scale": 1.0, "seed": 7}


@pytest.fixture()
def teacher():
    with mock_server.serve(model="trivial", image_size=12, channels=1, price_per_image=0.01) as srv:
        yield srv


def test_resolving_the_plan_in_one_place_changed_no_label(tmp_path: Path, teacher) -> None:
    private, public = plan_folders(tmp_path)
    sidp = ldpclient.label(str(private), teacher.model_url, seed=7, augment="none", epsilon=50,
                           state_dir=tmp_path / "s1")
    assert sidp.labels.tolist() == PINNED_SIDP_LABELS
    run = ldpclient.label(str(private), teacher.model_url, seed=7, epsilon=100, queries=300, epochs=1, baseline=True,
                          public=str(public), state_dir=tmp_path / "s2")
    assert run.report["plan"] == PINNED_LDPKIT_PLAN
    assert run.report["student"]["public_repeats"] == 150  # round(3 x 300 queries / 6 public images)


def _state_files(state: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(state.iterdir()) if p.is_file()}


def test_dry_run_prints_the_plan_and_spends_nothing(tmp_path: Path, teacher) -> None:
    private, public = plan_folders(tmp_path)
    state = tmp_path / "state"
    args = ["label", str(private), "--teacher", teacher.model_url, "--state-dir", str(state), "--queries", "300",
            "--epochs", "1", "--price", "0.01", "--privacy-cap", "250", "--baseline", "--public", str(public),
            "--output", str(tmp_path / "labels.csv")]
    runner = CliRunner()
    # before any run: the state directory is not even created
    dry = runner.invoke(app, [*args, "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    assert not state.exists() and not (tmp_path / "labels.csv").exists()
    plan = json.loads(dry.output)["plan"]
    assert plan["images"] == {"private": 30, "public": 6}
    assert plan["release"]["epsilon_record"] == pytest.approx(100) and plan["release"]["basis"] == "dct"
    assert plan["queries"]["private"] == 300 and plan["queries"]["public"] == 6 and plan["queries"]["baseline"] == 300
    assert plan["spend"]["money_at_most"] == pytest.approx(606 * 0.01) and plan["spend"]["privacy_cap"] == 250
    assert plan["student"]["public_repeats"] == 150 and plan["baseline"]["blank_query_noise"]["epsilon"] == 20
    assert plan["student"]["model"] == "small_cnn" and plan["student"]["crop_pixels"] == 0  # 12x12 grey
    assert plan["student"]["flip"] is None and plan["student"]["mirror_check_images"] == 0  # under 16 px: no check

    real = runner.invoke(app, [*args, "--json"])
    assert real.exit_code == 0, real.output
    report = json.loads(real.output)
    assert report["run_plan"] == plan  # the report keeps what the dry run showed
    before, usage = _state_files(state), teacher.usage()
    with Ledger(state / "ledger.sqlite") as ledger:
        spend = ledger.summary()
    dry = runner.invoke(app, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "nothing decoded, noised, sent or charged" in dry.output and "at most 300 private" in dry.output
    assert "data-free, student small_cnn; blank queries noised by laplace at epsilon 20 per record" in " ".join(
        dry.output.split())
    # ledger, journal and money unchanged: the same bytes in the state directory, the same bill at the teacher
    assert _state_files(state) == before and teacher.usage() == usage
    with Ledger(state / "ledger.sqlite") as ledger:
        assert ledger.summary() == spend


def test_a_dry_run_refuses_what_the_run_would_refuse_before_touching_data(tmp_path: Path, teacher) -> None:
    private, _ = plan_folders(tmp_path)
    result = CliRunner().invoke(app, ["label", str(private), "--teacher", teacher.model_url, "--dry-run",
                                      "--basis", "pool", "--reduce", "5", "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2 and "--reduce 5 does not divide" in result.output
    result = CliRunner().invoke(app, ["label", str(private), "--teacher", teacher.model_url, "--dry-run",
                                      "--queries", "1000", "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2 and "exceeds the 435 distinct Sup pairs" in result.output
    result = CliRunner().invoke(app, ["label", str(private), "--teacher", teacher.model_url, "--public",
                                      str(tmp_path / "nope"), "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2 and f"--public folder {str(tmp_path / 'nope')!r} does not exist" in result.output


def test_colour_images_plan_the_residual_student_with_shifts_beside_public_images_and_flip_on_request(
        tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    private, public = tmp_path / "private", tmp_path / "public"
    for folder, n in ((private, 8), (public, 4)):
        folder.mkdir()
        for k in range(n):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(folder / f"{folder.name}{k}.png")
    with mock_server.serve(model="trivial", image_size=16, channels=3) as srv:
        args = ["label", str(private), "--teacher", srv.model_url, "--state-dir", str(tmp_path / "s"), "--dry-run"]

        def student(*more: str) -> dict:
            return json.loads(CliRunner().invoke(app, [*args, "--json", *more]).output)["plan"]["student"]

        assert (student()["model"], student()["crop_pixels"]) == ("small_cnn", 0)  # noised queries alone
        beside = student("--public", str(public))
        assert (beside["model"], beside["crop_pixels"], beside["flip"]) == ("small_resnet", 2, None)
        assert beside["mirror_check_images"] == 0  # 4 public images: too few for the mirror check
        many = tmp_path / "many"
        many.mkdir()
        for k in range(120):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(many / f"m{k}.png")
        assert student("--public", str(many))["mirror_check_images"] == 120  # a mirrored and a shifted copy of each
        assert student("--public", str(many), "--no-flip")["mirror_check_images"] == 0
        queries = json.loads(CliRunner().invoke(app, [*args, "--json", "--public", str(many)]).output)["plan"][
            "queries"
        ]
        assert queries["public"] == 120 + 240
        shown = CliRunner().invoke(app, [*args, "--public", str(public), "--flip", "--student", "small_cnn"],
                                   terminal_width=200).output
        assert "small_cnn, 5 epochs, batch 32, rows shifted up to 2 px, mirrored half the time" in " ".join(
            shown.split()
        )


@pytest.mark.parametrize("extra", [{}, {"augment": "rand", "batch_size": 50}, {"flip": True, "students": 2}])
def test_the_dry_run_and_the_transfer_resolve_the_same_values(extra: dict) -> None:
    """``resolve_plan`` (the dry run's numbers) and the transfer resolve through one function: what the plan states
    is what the stages read."""
    import torch

    from ldpclient.run.options import LabelOptions
    from ldpclient.run.plan import resolve_plan
    from ldpclient.teachers.local import LocalTeacher
    from ldpclient.transfer.pipeline import KnowledgeTransfer

    teacher = LocalTeacher(lambda x: x.mean((2, 3)), (3, 16, 16), 3, name="channel")
    opts = LabelOptions(private_dir=Path("."), teacher="t", public=Path("."), **extra)
    plan = resolve_plan(opts, teacher.metadata(), identity="t", scope="t", records=40, public=120)
    transfer = KnowledgeTransfer(teacher, plan.mechanism, mode=plan.mode, **plan.settings._asdict())
    settled = transfer.resolved(torch.rand(40, 3, 16, 16), torch.rand(120, 3, 16, 16))
    assert (settled.queries, settled.query_batch_size, settled.public_repeats, settled.crop, settled.student,
            settled.mirror_check_images, settled.students) == (
        plan.num_queries, plan.query_batch_size, plan.public_repeats, plan.settings.training.crop,
        plan.settings.training.student,
        plan.mirror_check_images, plan.opts.students)
    assert settled.mirror_check_images == (0 if extra.get("flip") else 120) and settled.crop == 2


def test_the_student_the_plan_settled_is_a_fact_settled_again_for_other_counts() -> None:
    """The student chosen for the image counts is not written into the options as if the user had asked for it:
    planned again for other counts (decodable files only), the default is chosen again."""
    from ldpclient.run.options import LabelOptions
    from ldpclient.run.plan import resolve_plan
    from ldpclient.teachers.local import LocalTeacher

    teacher = LocalTeacher(lambda x: x.mean((2, 3)), (3, 16, 16), 3, name="channel")
    opts = LabelOptions(private_dir=Path("."), teacher="t", public=Path("."))
    plan = resolve_plan(opts, teacher.metadata(), identity="t", scope="t", records=40, public=120)
    assert plan.settings.training.student == "small_resnet" and plan.opts.student is None
    assert plan.describe()["student"]["model"] == "small_resnet"
    without_public = plan.with_counts(40, 0)
    assert without_public.settings.training.student == "small_cnn" == without_public.describe()["student"]["model"]
    asked = resolve_plan(dataclasses.replace(opts, student="small_cnn"), teacher.metadata(), identity="t", scope="t",
                         records=40, public=120)
    assert asked.settings.training.student == "small_cnn"  # what the user asked stays


def test_a_grey_28px_run_trains_the_pooled_cnn_and_its_data_free_baseline_the_small_cnn_unless_one_is_asked() -> None:
    from ldpclient.run.options import LabelOptions
    from ldpclient.run.plan import resolve_plan
    from ldpclient.teachers.local import LocalTeacher

    meta = LocalTeacher(lambda x: x.mean((2, 3)), (1, 28, 28), 3, name="grey").metadata()
    opts = LabelOptions(private_dir=Path("."), teacher="t", baseline=True)
    plan = resolve_plan(opts, meta, identity="t", scope="t", records=40, public=0)
    assert plan.baseline is not None
    assert (plan.resolved.student, plan.baseline.resolved.student) == ("pooled_cnn", "small_cnn")
    assert (plan.describe()["student"]["model"], plan.describe()["baseline"]["student"]) == ("pooled_cnn", "small_cnn")
    asked = resolve_plan(dataclasses.replace(opts, student="small_cnn"), meta, identity="t", scope="t", records=40,
                         public=0)
    assert asked.baseline is not None
    assert (asked.resolved.student, asked.baseline.resolved.student) == ("small_cnn", "small_cnn")


@pytest.mark.parametrize("asked, settled", [
    ({}, ("dct", 1, "clip")),
    ({"epsilon": 2.0, "epsilon_unit": "element"}, ("pool", 4, "blur:2,clip")),
    ({"reduce": 2, "postprocess": "clip", "baseline": True}, ("pool", 2, "clip")),
    ({"epsilon": 0.0}, ("pool", 4, "blur:2,clip")),
])
def test_the_release_settled_for_the_shape_is_a_fact_of_the_plan_and_the_options_stay_as_asked(
    asked: dict, settled: tuple
) -> None:
    """The basis, the pooling and the post-processing a run settles for the teacher's shape are the plan's
    ``release``: the plan holds the very options it was given, counted again or not, and every reader (the dry
    run, the transfer's settings) reads the settled values."""
    from ldpclient.run.options import LabelOptions
    from ldpclient.run.plan import ReleaseSettings, resolve_plan
    from ldpclient.teachers.local import LocalTeacher

    teacher = LocalTeacher(lambda x: x.mean((2, 3)), (1, 28, 28), 3, name="channel")
    opts = LabelOptions(private_dir=Path("."), teacher="t", **asked)
    plan = resolve_plan(opts, teacher.metadata(), identity="t", scope="t", records=40, public=0)
    assert plan.opts is opts and plan.with_counts(30, 0).opts is opts
    assert plan.release == ReleaseSettings(*settled)
    assert [opts.basis, opts.reduce, opts.postprocess] == [asked.get(k) for k in ("basis", "reduce", "postprocess")]
    described = plan.describe()["release"]
    assert (described["basis"], described["reduce"], described["postprocess"]) == settled
    assert plan.settings.plan.postprocess == settled[2] == plan.with_counts(30, 0).settings.plan.postprocess
    if asked.get("baseline"):  # a pooled run's blank queries are post-processed as the run's
        assert plan.baseline is not None and plan.baseline.postprocess == settled[2]


def test_the_price_booked_and_the_cap_held_are_terms_of_the_plan_not_options_rewritten(tmp_path: Path, teacher) -> None:
    """The cap a state holds and the price a query is booked at are learnt once the state and the teacher are
    opened: they go into the plan's terms, and the options stay what was asked."""
    from ldpclient.run.options import LabelOptions
    from ldpclient.run.plan import RunTerms
    from ldpclient.run.prepare import connect_teacher, plan_under_caps

    state = tmp_path / "state"
    opts = LabelOptions(private_dir=tmp_path, teacher=teacher.model_url, price=0.01, state_dir=state)
    opened, meta = connect_teacher(opts, token=None, teacher=None, state=state)
    assert plan_under_caps(opts, opened, meta, state, (30, 0)).terms == RunTerms(0.01, None)
    Ledger(opts.state_locations(state).ledger, cap_epsilon=400.0).close()  # the state now holds a cap
    plan = plan_under_caps(opts, opened, meta, state, (30, 0))
    assert (plan.opts.privacy_cap, plan.opts.price) == (None, 0.01) and plan.terms == RunTerms(0.01, 400.0)
    assert plan.describe()["spend"]["privacy_cap"] == 400.0
    tighter = dataclasses.replace(opts, privacy_cap=250.0)
    assert plan_under_caps(tighter, opened, meta, state, (30, 0)).terms == RunTerms(0.01, 250.0)


def test_the_resolved_settings_leave_nothing_to_decide() -> None:
    """Every field of the transfer's resolved settings holds a value; None is one only where it means "none": no file
    to save the student to, the built-in adapter."""
    import dataclasses

    from ldpclient.transfer.resolve import Resolved

    optional = {f.name for f in dataclasses.fields(Resolved) if "Optional[" in str(f.type) or "None" in str(f.type)}
    assert optional == {"checkpoint", "adapter"}


def test_a_run_resolves_its_settings_once_and_its_baseline_once_more(tmp_path: Path, teacher, monkeypatch) -> None:
    """The plan resolves the settings (ldpclient.transfer.resolve) and the run's transfer reads what it resolved;
    the data-free baseline beside it is a plan of its own, resolved once too, by the plan, and its transfer reads
    that."""
    from ldpclient.run import plan as run_plan
    from ldpclient.transfer import pipeline
    from ldpclient.transfer import resolve as transfer_resolve

    calls: list[str] = []

    def counted(where: str):
        def call(*args: object, **kwargs: object) -> object:
            calls.append(where)
            return transfer_resolve.resolve(*args, **kwargs)  # type: ignore[arg-type]
        return call

    for module in (run_plan, pipeline):  # the only modules that call it (tests/test_layout.py)
        monkeypatch.setattr(module, "resolve", counted(module.__name__))
    private, public = plan_folders(tmp_path)
    ldpclient.label(str(private), teacher.model_url, seed=7, queries=300, epochs=1, state_dir=tmp_path / "s1")
    assert calls == ["ldpclient.run.plan"]
    calls.clear()
    run = ldpclient.label(str(private), teacher.model_url, seed=7, queries=300, epochs=1, baseline=True,
                          public=str(public), state_dir=tmp_path / "s2")
    assert calls == ["ldpclient.run.plan"] * 2 and run.report["baseline"]["queries_sent"] > 0