"""One teacher, one identity: every spelling of one address, the CLI and the API
share the ledger's releases, the journal's batches and the money cap; stores written under an older
spelling are merged once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ldpclient.io.folders import spool_private_folder
from ldpclient.privacy import Domain, Ledger, laplace
from ldpclient.teachers import Journal, QueryClient, connect
from ldpclient.teachers.identity import canonical_url, identity_of_scope, merge_scope_aliases, teacher_identity
from ldpclient.teachers.oip import OIPTeacher
from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.settings import PlanSettings
from support.cli_runs import invoke, mock_teacher, private_folder


def test_canonical_url_normalises_spelling_but_keeps_hosts_apart() -> None:
    same = ["http://127.0.0.1:8080/v2/models/m", "http://127.0.0.1:8080/v2/models/m/", "HTTP://127.0.0.1:8080//v2/models/m",
            "http://user:pw@127.0.0.1:8080/v2/models/m?x=1#f"]
    assert {canonical_url(u) for u in same} == {"http://127.0.0.1:8080/v2/models/m"}
    assert canonical_url("http://Example.COM:80/m") == canonical_url("http://example.com/m") == "http://example.com/m"
    assert canonical_url("https://h:443/m") == "https://h/m" and canonical_url("https://h:8443/m") == "https://h:8443/m"
    assert canonical_url("http://localhost:8080/m") != canonical_url("http://127.0.0.1:8080/m")


def test_every_spelling_and_the_adapter_have_one_identity() -> None:
    spellings = ["http://127.0.0.1:9/v2/models/digits", "http://127.0.0.1:9/v2/models/digits/",
                 "oip+http://127.0.0.1:9/v2/models/digits", "http://127.0.0.1:9/digits", "oip+HTTP://127.0.0.1:9/digits/"]
    ids = {teacher_identity(s) for s in spellings}
    assert ids == {"oip:http://127.0.0.1:9/v2/models/digits"}
    assert OIPTeacher.from_url(spellings[1], check_ready=False).journal_scope in ids
    # what older runs stored: the CLI's redacted address as typed, the adapter's unnormalised scope
    assert identity_of_scope("http://127.0.0.1:9/v2/models/digits/") in ids
    assert identity_of_scope("oip:HTTP://127.0.0.1:9/v2/models/digits") in ids
    assert identity_of_scope("local-preview") is None and identity_of_scope("local:pkg.mod:obj") is None
    assert teacher_identity("torchserve+http://h:8080/m/2") == "torchserve:http://h:8080/predictions/m/2"


def test_one_address_spelled_three_ways_is_noised_once_and_paid_once(tmp_path: Path) -> None:
    """Runs as .../digits, .../digits/ and oip+http://... are one teacher: one cap and one release of each image
    (not 4x the cap billed and each image noised 4 times)."""
    folder = private_folder(tmp_path)
    common = ["--state-dir", str(tmp_path / "state"), "--epsilon", "4", "--epsilon-unit", "element", "--reduce", "2",
              "--queries", "24", "--batch-size", "8", "--epochs", "1", "--price", "0.01", "--money-cap", "0.30",
              "--max-retry-time", "0", "--json", "--seed", "3"]
    with mock_teacher() as srv:
        url = srv.model_url
        reports = []
        for k, spelling in enumerate((url, url + "/", "oip+" + url)):
            result = invoke(
                ["label", str(folder), "--teacher", spelling, "--output", str(tmp_path / f"l{k}.csv"), *common]
            )
            assert result.exit_code == 0, result.output
            reports.append(json.loads(result.stdout))
        billed = srv.usage()["total"]["images"]
    assert billed == 24  # once, not three times
    assert [r["ledger"]["fresh"] for r in reports] == [12, 0, 0]
    assert [r["queries"]["sent"] for r in reports] == [24, 0, 0]


def test_the_cli_then_the_api_on_one_state_dir_noise_and_pay_nothing_twice(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    state = tmp_path / "state"
    with mock_teacher() as srv:
        result = invoke(["label", str(folder), "--teacher", srv.model_url + "/", "--state-dir", str(state),
                       "--output", str(tmp_path / "l.csv"), "--augment", "none", "--postprocess", "clip",
                       "--epsilon", "4", "--epsilon-unit", "element", "--reduce", "2", "--batch-size", "4",
                       "--max-retry-time", "0", "--json"])
        assert result.exit_code == 0, result.output
        plan_seed = json.loads(result.stdout)["plan"]["seed"]
        billed = srv.usage()["total"]["images"]
        # the same job through the library: the folder's files as sources, the adapter's own identity
        teacher = connect("oip+" + srv.model_url)
        mech = laplace(4.0, per="element", reduction=2, domain=Domain(0.0, 1.0))
        with spool_private_folder(folder, (1, 8, 8)) as images, Ledger(state / "ledger.sqlite") as ledger:
            client = QueryClient(teacher, batch_size=4, journal=Journal(state / "journal.sqlite"))
            kt = KnowledgeTransfer(
                teacher,
                mech,
                ledger=ledger,
                client=client,
                mode="sidp",
                seed=plan_seed,
                plan=PlanSettings(postprocess="clip", query_batch_size=4),
            )
            out = kt.run(images.records)
            client.close()
        assert srv.usage()["total"]["images"] == billed  # 0 batches billed twice
    assert out.counts["releases_fresh"] == 0  # 0 records noised twice
    assert len(out.labels) == 12 and torch.equal(out.labels, out.labels.long())


def test_stores_written_under_an_older_spelling_are_merged_once(tmp_path: Path) -> None:
    x = torch.rand(3, 1, 8, 8)
    identity = "oip:http://127.0.0.1:9/v2/models/m"
    with Ledger(tmp_path / "l.sqlite") as ledger:
        first = ledger.release(laplace(1.0, per="record"), x, scope="http://127.0.0.1:9/v2/models/m/")  # an old CLI
        assert merge_scope_aliases(ledger, identity) == 3 and ledger.scopes() == [identity]
        again = ledger.release(laplace(1.0, per="record"), x, scope=identity)
        assert again.reused.all() and torch.equal(first.values, again.values)
        assert merge_scope_aliases(ledger, identity) == 0  # once
    with Journal(tmp_path / "j.sqlite") as journal:
        for scope in ("http://127.0.0.1:9/v2/models/m", "oip:http://127.0.0.1:9/v2/models/m/"):
            journal.record(scope, "b-000000", torch.tensor([1, 2]), digest="d", cost=0.5, billed=None, requests=1,
                           run_id="run")
        assert merge_scope_aliases(journal, identity) == 2
        assert journal.scopes() == [identity] and journal.total_spend(identity) == pytest.approx(1.0)
        assert journal.get(identity, "b-000000") is not None
