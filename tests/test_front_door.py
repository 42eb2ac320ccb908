"""The embedding examples of README.md and docs/api.md, run as they are written (only the teacher's address is
replaced by a mock teacher's): the front door `ldpclient.label` and the lower layers. Plus the front door's contract:
the same state and resume as the CLI, tensors accepted, unknown options refused, `import ldpclient` light."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import ldpclient
import mock_server

ROOT = Path(__file__).resolve().parents[1]
ADDRESS = "http://127.0.0.1:8080/v2/models/digits"


def _example(name: str, page: str = "README.md") -> str:
    text = (ROOT / page).read_text(encoding="utf-8")
    m = re.search(rf"<!-- example: {name} [^>]*-->\n```python\n(.*?)```", text, re.S)
    assert m, f"{page} has no example {name!r}"
    return m.group(1)


def _folder(root: Path, n: int = 40, size: int = 8) -> Path:
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        Image.fromarray(rng.integers(0, 256, (size, size), dtype=np.uint8)).save(root / f"img{k:02d}.png")
    return root


def test_the_front_door_example_runs_and_is_at_most_ten_lines(tmp_path: Path, monkeypatch, capsys) -> None:
    code = _example("front-door")
    assert len([line for line in code.splitlines() if line.strip()]) <= 10
    _folder(tmp_path / "out" / "private")
    (tmp_path / "out" / "check.csv").write_text("file,label\nimg00.png,0\nimg01.png,1\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with mock_server.serve(model="trivial", image_size=8, channels=1, price_per_image=0.001) as srv:
        exec(compile(code.replace(ADDRESS, srv.model_url), "README front-door", "exec"), {})
        billed = srv.usage()["total"]["images"]
        out = capsys.readouterr().out
        assert "epsilon per image 50" in out and out.count("img") == 40
        level = out.splitlines()[0].split(":")[0].split(",")[0]  # the verdict first
        assert level in ("usable", "doubtful", "not worth having")
        # the same call again resumes: nothing noised again, nothing paid again
        again = ldpclient.label("out/private", srv.model_url + "/", epsilon=50, privacy_cap=200, price=0.001,
                                money_cap=10.0, state_dir="app-state", check="out/check.csv")
        assert srv.usage()["total"]["images"] == billed
    assert again.counts["releases_fresh"] == 0 and again.report["queries"]["sent"] == 0
    assert again.verdict.check is not None and again.verdict.check["images"] == 2
    assert not list(tmp_path.glob("*.csv"))  # no output= given: no files but the state


def test_the_lower_layers_example_runs(tmp_path: Path, monkeypatch) -> None:
    code = _example("lower-layers", "docs/api.md")
    _folder(tmp_path / "out" / "private", n=80, size=28)  # 3,160 distinct pairs: room for the 2,000 queries
    monkeypatch.chdir(tmp_path)
    with mock_server.serve(model="trivial", image_size=28, channels=1) as srv:
        scope: dict = {}
        exec(compile(code.replace(ADDRESS, srv.model_url), "docs/api.md lower-layers", "exec"), scope)
    assert scope["result"].labels.shape == (80,)


def test_a_tensor_goes_in_and_the_cli_sees_the_same_state(tmp_path: Path) -> None:
    x = torch.rand(12, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    with mock_server.serve(model="trivial", image_size=8, channels=1) as srv:
        first = ldpclient.label(x, srv.model_url, epsilon=20, augment="none", state_dir=tmp_path / "s",
                                output=tmp_path / "labels.jsonl")
        second = ldpclient.label(x.double(), srv.model_url, epsilon=20, augment="none", state_dir=tmp_path / "s")
        billed = srv.usage()["total"]["images"]
    assert first.names == tuple(str(i) for i in range(12)) and torch.isnan(first.confidences).all()
    assert (tmp_path / "labels.jsonl").exists() and (tmp_path / "labels.report.json").exists()
    assert second.counts["releases_fresh"] == 0 and billed == 12  # float64 copies: the same images
    assert torch.equal(first.labels, second.labels)


def test_the_typed_options_are_the_label_commands_options() -> None:
    """Every key of ``LabelKeywords`` is an option the front door takes, and every option it takes is a key: the
    run's options less those the signature names, the teacher's facts and the network's."""
    import dataclasses

    from ldpclient.run.facts import FACT_OPTIONS, NETWORK_OPTIONS
    from ldpclient.run.keywords import LabelKeywords
    from ldpclient.run.options import LabelOptions

    taken = {f.name for f in dataclasses.fields(LabelOptions)} - {"private_dir", "teacher", "output", "dry_run",
                                                                   "network", "facts"}
    assert set(LabelKeywords.__annotations__) == taken | FACT_OPTIONS | NETWORK_OPTIONS


def test_bad_ways_in_are_named() -> None:
    with pytest.raises(TypeError, match="unknown option"):
        ldpclient.label("x", "http://127.0.0.1:9/m", epsilonn=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="folder path, a tensor or a RecordSource"):
        ldpclient.label([1, 2, 3], "http://127.0.0.1:9/m")  # type: ignore[arg-type]


def test_the_network_and_the_teacher_facts_are_options_by_name_too(tmp_path: Path) -> None:
    """``timeout=``, ``wire=``, ``num_classes=``, ... reach the run as ``--timeout``, ``--wire``, ... do; public
    images given as a tensor take the same way in as the private ones."""
    x = torch.rand(30, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with mock_server.serve(model="trivial", image_size=8, channels=1) as srv:
        result = ldpclient.label(x, srv.model_url, epsilon=50, queries=60, epochs=1, state_dir=tmp_path / "s",
                                 timeout=5.0, max_retry_time=0.0, wire="json", num_classes=10,
                                 public=torch.rand(4, 1, 8, 8), seed=1)
    assert result.report["teacher"]["wire"] == "json" and result.report["private_dir"] is None
    assert result.counts["public_images"] == 4 and len(result.labels) == 30
    with pytest.raises(ValueError, match="--timeout"):
        ldpclient.label(x, "http://127.0.0.1:9/m", timeout=0.0, state_dir=tmp_path / "t")


def test_import_ldpclient_is_light() -> None:
    code = "import sys, ldpclient; print('torch' in sys.modules, len(ldpclient.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False" and int(out[1]) >= 15


def test_the_front_door_computes_on_the_cores_it_may_use_and_leaves_the_callers_threads_as_they_were(
        tmp_path: Path, monkeypatch) -> None:
    """As the command does: torch's threads above the cores this process may use are lowered for the call (8 on 2
    cores made the README's example 1.7 times slower), and the caller's count is back afterwards."""
    from ldpclient.io.folders import available_cores

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    folder = _folder(tmp_path / "private", n=12)
    during: set[int] = set()
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(available_cores() + 3)
        with mock_server.serve(model="trivial", image_size=8, channels=1) as srv:
            ldpclient.label(folder, srv.model_url, epsilon=20, queries=24, epochs=1, state_dir=tmp_path / "s",
                            progress=lambda stage, done, total: during.add(torch.get_num_threads()))
        assert during == {available_cores()} and torch.get_num_threads() == available_cores() + 3
    finally:
        torch.set_num_threads(before)


def test_the_front_door_reports_progress_to_a_callback_and_on_a_terminal(tmp_path: Path, monkeypatch,
                                                                          capsys) -> None:
    """``progress=`` hears every stage from the start to its end; the command's bars appear by default only where
    standard error is a terminal, and ``quiet=True`` silences them."""
    folder = _folder(tmp_path / "private", n=12)
    heard: list[tuple[str, float, float | None]] = []
    with mock_server.serve(model="trivial", image_size=8, channels=1) as srv:
        run = ldpclient.label(folder, srv.model_url, epsilon=20, queries=24, epochs=1, state_dir=tmp_path / "s",
                              progress=lambda stage, done, total: heard.append((stage, done, total)))
        assert capsys.readouterr().err == ""  # not a terminal here: no bars by default
        stages = list(dict.fromkeys(stage for stage, _, _ in heard))
        assert stages[:3] == ["loading", "noising", "querying"] and "training" in stages and "labelling" in stages
        last = {stage: (done, total) for stage, done, total in heard}
        # an image no query of the (unseeded) plan draws on is not released: the bar ends at the images released
        released = 12 - run.report["counts"]["not_released"]
        assert last["querying"] == (24.0, 24.0) and last["noising"] == (released, released)
        monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
        ldpclient.label(folder, srv.model_url, epsilon=20, queries=24, epochs=1, state_dir=tmp_path / "s")
        assert "querying" in capsys.readouterr().err  # a terminal: the command's bars
        ldpclient.label(folder, srv.model_url, epsilon=20, queries=24, epochs=1, state_dir=tmp_path / "s",
                        quiet=True)
        assert capsys.readouterr().err == ""


def test_a_type_checker_sees_every_lazy_export_from_its_module() -> None:
    """``ldpclient/__init__.py`` imports each lazy export for the type checker (so that ``ldpclient.label`` has its
    signature there, not Any), from the module ``_EXPORTS`` names."""
    import ast

    tree = ast.parse(Path(ldpclient.__file__).read_text(encoding="utf-8"))
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    seen = {alias.name: f"ldpclient.{node.module}" for node in guarded.body if isinstance(node, ast.ImportFrom)
            for alias in node.names}
    assert seen == ldpclient._EXPORTS
