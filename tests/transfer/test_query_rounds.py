"""Query rounds (ldpclient.transfer.rounds): the plan's queries sent in doubling rounds, stopped where the student
stops learning from them."""

import pytest
import torch

from ldpclient.transfer.rounds import QueryRound, learnt_too_little, round_ends
from ldpclient.transfer.settings import PlanSettings
from support.transfers import quadrant_records, quadrant_transfer


def test_rounds_double_and_the_last_completes_the_plan() -> None:
    assert round_ends(8, 1) == [8]
    assert round_ends(8, 3) == [2, 4, 8]
    assert round_ends(10, 3) == [3, 5, 10]
    assert round_ends(3, 4) == [1, 2, 3]  # rounds that would add no batch are merged
    assert round_ends(1, 8) == [1]
    with pytest.raises(ValueError):
        round_ends(0, 2)
    with pytest.raises(ValueError):
        round_ends(4, 0)


def test_a_round_stops_the_plan_only_when_it_gained_too_little() -> None:
    first = QueryRound(100, 10, 0.5)
    assert first.gain is None and not learnt_too_little(first, 0.01)
    assert learnt_too_little(QueryRound(200, 20, 0.505, 0.5), 0.01)
    assert not learnt_too_little(QueryRound(200, 20, 0.52, 0.5), 0.01)
    assert QueryRound(200, 20, 0.52, 0.5).as_dict()["gain"] == pytest.approx(0.02)


class _Counting:
    """Counts the queries a teacher answers."""

    def __init__(self, teacher):
        self.teacher, self.queries = teacher, 0

    def metadata(self):
        return self.teacher.metadata()

    def classify(self, derived):
        self.queries += len(derived.values)
        return self.teacher.classify(derived)


def test_a_round_that_gains_nothing_leaves_the_rest_of_the_plan_unsent() -> None:
    x, y = quadrant_records()
    kt = quadrant_transfer(
        plan=dict(num_queries=1280, query_rounds=3, min_round_gain=1.0),
    )  # no round can gain a whole share
    kt.teacher = counting = _Counting(kt.teacher)
    result = kt.run(x)
    # 5 batches of 256: rounds end after 2 and 3 batches; the second round cannot gain 1.0: the third is not sent
    assert counting.queries == 3 * 256 == result.counts["queries"]
    assert result.counts["batches"] == 3
    assert [r.queries for r in result.query_rounds] == [512, 768]
    first, second = result.query_rounds
    assert first.previous is None and second.previous is not None and second.held_out >= first.held_out > 0
    assert 0 <= second.agreement <= 1 and result.summary()["query_rounds"][1]["gain"] == pytest.approx(second.gain)
    assert sum(result.teacher_label_histogram) == 768
    assert (result.labels == y).float().mean() >= 0.7  # the last round's student labels the records


def test_rounds_that_send_every_query_learn_the_one_shot_student_exactly() -> None:
    x, _ = quadrant_records()
    once = quadrant_transfer(plan=dict(num_queries=1280)).run(x)
    rounds = quadrant_transfer(plan=dict(num_queries=1280, query_rounds=3, min_round_gain=-1.0)).run(x)
    assert [r.queries for r in rounds.query_rounds] == [512, 768, 1280]
    assert rounds.counts["queries"] == once.counts["queries"] == 1280
    assert torch.equal(rounds.labels, once.labels)
    assert once.query_rounds == [] and "query_rounds" not in once.summary()


def test_rounds_need_a_student_and_held_out_queries() -> None:
    with pytest.raises(ValueError, match="SIDP"):
        quadrant_transfer("sidp", "none", plan=dict(query_rounds=2))
    with pytest.raises(ValueError, match="val_fraction"):
        quadrant_transfer(plan=dict(query_rounds=2), training=dict(val_fraction=0.0))
    with pytest.raises(ValueError, match="query_rounds"):
        PlanSettings(query_rounds=0)
    with pytest.raises(ValueError, match="min_round_gain"):
        PlanSettings(min_round_gain=float("nan"))


def test_label_sends_rounds_reports_them_and_the_dry_run_states_the_least_and_most_it_pays(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    import mock_server
    from ldpclient.cli.commands import app
    from support.image_folders import plan_folders

    private, _ = plan_folders(tmp_path)
    with mock_server.serve(model="trivial", image_size=12, channels=1, price_per_image=0.01) as teacher:
        args = ["label", str(private), "--teacher", teacher.model_url, "--state-dir", str(tmp_path / "s"),
                "--queries", "400", "--batch-size", "50", "--query-rounds", "3", "--epochs", "2", "--price", "0.01",
                "--output", str(tmp_path / "labels.csv")]
        runner = CliRunner()
        dry = runner.invoke(app, [*args, "--dry-run", "--json"])
        assert dry.exit_code == 0, dry.output
        plan = json.loads(dry.output)["plan"]
        # 8 batches of 50: rounds end after 2, 4 and 8; the first two are always sent
        assert plan["queries"]["rounds"] == 3 and plan["queries"]["private_at_least"] == 200
        assert plan["spend"]["money_at_least"] == pytest.approx(2.0) and plan["spend"][
            "money_at_most"
        ] == pytest.approx(4.0)
        words = runner.invoke(app, [*args, "--dry-run"])
        assert "in up to 3 rounds of doubling size, at least 200 private" in words.output
        assert "at least 2, at most 4" in words.output

        real = runner.invoke(app, [*args, "--json"])
        assert real.exit_code == 0, real.output
        report = json.loads(real.output)
        rounds = report["queries"]["rounds"]
        assert [r["queries"] for r in rounds] in ([100, 200], [100, 200, 400])
        assert rounds[0]["gain"] is None and all(r["held_out"] > 0 for r in rounds)
        stopped = len(rounds) == 2
        assert stopped == (rounds[1]["gain"] < 0.01)
        sent = rounds[-1]["queries"]
        assert report["queries"]["sent"] == sent  # what the teacher was asked and billed: the rounds sent, no more
        assert report["cost"]["spent_run"] == pytest.approx(0.01 * sent)
        assert teacher.usage()["total"]["images"] == sent
        assert report["run_plan"]["queries"]["private_at_least"] == 200

        again = runner.invoke(app, [*args, "--output", str(tmp_path / "again.csv"), "--html"])
        assert again.exit_code == 0, again.output
        assert "rounds" in again.output and "agreement on" in again.output
        page = (tmp_path / "again.html").read_text()
        assert "query rounds (--query-rounds)" in page and "100 queries: " in page


def test_label_refuses_rounds_it_cannot_judge(tmp_path) -> None:
    from typer.testing import CliRunner

    from ldpclient.cli.commands import app

    for extra, words in ((["--query-rounds", "9"], "--query-rounds must be from 1 to 8"),
                         (["--query-rounds", "2", "--augment", "none"], "--query-rounds are judged by a student")):
        result = CliRunner().invoke(app, ["label", str(tmp_path), "--teacher", "http://127.0.0.1:9/v2/models/m",
                                          "--state-dir", str(tmp_path / "s"), *extra])
        assert result.exit_code == 2 and words in result.output, result.output
