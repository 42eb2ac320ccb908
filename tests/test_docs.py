"""The manual stays true: every shell, Python and TOML example of README.md and docs/ runs, against a mock
teacher this test starts, in a scratch folder holding a small private folder; the option tables are the
``--help`` texts; the pages stay short.

How a page marks its examples (an HTML comment on the line above a fence):

* nothing: ``bash`` runs under ``bash -euo pipefail``, ``python`` as a script, ``toml`` as the ``--config``
  of a ``label`` run (with a state directory of its own); each must exit 0. Blocks of one page run in order, in one
  folder, so a later block
  may read what an earlier one wrote.
* ``<!-- example: prints -->`` above a ``text`` block: the Python block before it must print exactly that.
* ``<!-- example: server (...) -->``: each line starts a server, which must say it listens; then it is
  stopped (``--port 0`` is added so that it never collides).
* ``<!-- example: skip (why) -->``: not run; the reason is required.
* ``<!-- example: poor (why) -->`` above a ``bash`` block: a deliberately poor setting; it runs as any other, and
  every run report it writes must carry a verdict other than "usable". Every run report any other example
  writes must carry the verdict "usable": the manual's examples give labels worth having.

The scratch folder holds ``out/private`` and ``out/check.csv`` as ``make demo`` writes them (the digits the mock
``digits`` teacher never saw: the first :data:`DEMO_IMAGES`, with the true digits of 100 of them), and that
teacher serves the examples.

The address ``127.0.0.1:8080`` in an example is the mock teacher's, whatever port it got.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import mock_server
from ldpclient.cli.reference import stale_pages
from ldpclient.run.demo import write_demo_folder
from support.doc_examples import DEMO_IMAGES, DOC_ADDRESS, PAGES, ROOT, examples

MAX_LINES = 300


def _images(folder: Path, n: int, size: int, channels: int, seed: int) -> None:
    """``n`` synthetic images: a bright disc or bar at a random place on a dark noisy ground."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    yy, xx = np.mgrid[:size, :size]
    for k in range(n):
        cy, cx, r = rng.integers(size // 4, 3 * size // 4, 2).tolist() + [int(rng.integers(size // 8, size // 3))]
        shape = ((yy - cy) ** 2 + (xx - cx) ** 2 <= r * r) if k % 2 else (np.abs(xx - cx) <= r // 2)
        img = rng.integers(0, 40, (size, size, channels)) + shape[..., None] * rng.integers(150, 215, channels)
        arr = img.clip(0, 255).astype(np.uint8)
        Image.fromarray(arr[..., 0] if channels == 1 else arr).save(folder / f"img{k:02d}.png")


@pytest.fixture(scope="module")
def teacher_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the mock ``digits`` teacher keeps its trained weights: trained once for all the pages."""
    return tmp_path_factory.mktemp("teacher-cache")


@pytest.fixture()
def workspace(tmp_path: Path, teacher_cache: Path):
    """A scratch folder with ``out/private`` and ``out/check.csv`` (the demo's), ``private/`` (30 synthetic grey
    28x28 images), ``imgs/`` and ``photos/`` (class folders of 32x32 colour images, for the mock teacher's training
    examples), and the mock ``digits`` teacher (the demo's) logging its queries."""
    write_demo_folder(tmp_path / "out", count=DEMO_IMAGES)
    _images(tmp_path / "private", 30, 28, 1, seed=1)
    for folder in ("imgs", "photos"):
        for c in range(3):
            _images(tmp_path / folder / f"class{c}", 4, 32, 3, seed=10 + c)
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LDPCLIENT_", "HF_"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        HOME=str(tmp_path / "home"),
        LDPCLIENT_STATE_DIR=str(tmp_path / "state"),
        PYTHONPATH=str(ROOT),
    )
    with mock_server.serve(model="digits", image_size=28, seed=0, state_dir=str(teacher_cache),
                           query_log=str(tmp_path / "queries.jsonl")) as srv:
        yield tmp_path, env, f"127.0.0.1:{srv.port}"


def _run(cmd: list[str], where: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{where} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _server_lines(body: str) -> list[str]:
    lines = []
    for raw in body.splitlines():
        line = raw.split("  #")[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def _start_server(line: str, where: str, cwd: Path, env: dict[str, str]) -> None:
    proc = subprocess.Popen(["bash", "-c", f"{line} --port 0"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen: list[str] = []
    listening = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for out in proc.stdout:
            seen.append(out)
            if "listening on http://" in out:
                listening.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        ok = listening.wait(timeout=300)
        assert ok, (
            f"{where}: `{line}` did not start listening: {''.join(seen)} "
            f"{proc.stderr.read() if proc.poll() is not None and proc.stderr else ''}"
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        if proc.stderr is not None:
            proc.stderr.close()


def _reports(cwd: Path) -> dict[Path, int]:
    """Every run report under ``cwd`` and its modification time (ns)."""
    return {path: path.stat().st_mtime_ns for path in cwd.rglob("*.report.json")}


def _verdicts_written(cwd: Path, before: dict[Path, int]) -> list[tuple[str, str]]:
    """``(report file, verdict level)`` of every label run report under ``cwd`` written since ``before``."""
    out = []
    for path, mtime in sorted(_reports(cwd).items()):
        if before.get(path) != mtime:
            verdict = json.loads(path.read_text(encoding="utf-8")).get("verdict")
            if verdict is not None:
                out.append((path.name, verdict["level"]))
    return out


def run_page(page: Path, cwd: Path, env: dict[str, str], address: str) -> int:
    """Run every example of ``page`` in order, checking the verdict of every run report each writes; returns how
    many ran."""
    ran = 0
    last_stdout: str | None = None
    for n, ex in enumerate(examples(page)):
        before = _reports(cwd)
        body = ex.body.replace(DOC_ADDRESS, address)
        if ex.kind == "skip":
            assert re.fullmatch(r"\(.+\)", ex.note), f"{ex.where}: a skipped example must say why: skip (reason)"
            continue
        if ex.kind == "prints":
            assert last_stdout is not None, f"{ex.where}: 'prints' follows no Python example"
            assert last_stdout == ex.body, f"{ex.where}: the example printed\n{last_stdout}"
            continue
        if ex.kind == "server":
            for line in _server_lines(body):
                _start_server(line, ex.where, cwd, env)
            ran += 1
            continue
        if ex.kind == "poor":
            assert ex.lang == "bash" and re.fullmatch(r"\(.+\)", ex.note), f"{ex.where}: poor (why) above bash"
        if ex.lang == "bash":
            last_stdout = _run(["bash", "-euo", "pipefail", "-c", body], ex.where, cwd, env)
        elif ex.lang == "python":
            script = cwd / f"example_{n}.py"
            script.write_text(body, encoding="utf-8")
            last_stdout = _run([sys.executable, str(script)], ex.where, cwd, env)
        elif ex.lang == "toml":
            config = cwd / f"example_{n}.toml"
            config.write_text(body, encoding="utf-8")
            # a state directory of its own: the page's earlier runs have spent these images' budget already
            _run(["ldpclient", "label", "out/private", "--config", str(config), "--quiet", "--output",
                  f"config_{n}.csv", "--state-dir", f"state_{n}"], ex.where, cwd, env)
        else:
            continue  # output shown to the reader (text), nothing to run
        for report, level in _verdicts_written(cwd, before):
            if ex.kind == "poor":
                assert level != "usable", f"{ex.where}: a poor setting's {report} says the labels are usable"
            else:
                assert level == "usable", f"{ex.where}: {report} says the labels are {level}"
        ran += 1
    return ran


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_example_on_the_page_runs(page: Path, workspace) -> None:
    cwd, env, address = workspace
    runnable = [e for e in examples(page) if e.kind not in ("skip", "prints") and e.lang in ("bash", "python", "toml")]
    assert run_page(page, cwd, env, address) == len(runnable)


def test_the_pages_are_short_and_their_option_tables_are_the_help_texts() -> None:
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").count("\n")
        assert lines <= MAX_LINES, f"{page.name} has {lines} lines (at most {MAX_LINES})"
    assert stale_pages(PAGES) == [], "run: python -m ldpclient.cli.reference docs/*.md"
    tables = "".join(p.read_text(encoding="utf-8") for p in PAGES)
    for command in ("label", "noise", "budget", "demo", "audit", "serve-mock"):
        assert tables.count(f"<!-- options: {command} -->") == 1, f"ldpclient {command} needs one option table"


def test_every_relative_link_of_the_pages_names_a_file_that_exists() -> None:
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_every_result_file_is_indexed_in_benchmarks() -> None:
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    index = text[text.index("## Result files"):]
    for path in sorted((ROOT / "benchmarks" / "results").iterdir()):
        assert f"| `{path.name}` |" in index, f"BENCHMARKS.md's result-file index lacks {path.name}"


def test_a_stale_table_or_a_failing_example_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- options: budget -->\n| stale |\n<!-- end options -->\n", encoding="utf-8")
    assert stale_pages([page]) == [page]
    page.write_text("```bash\nfalse\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="exited 1"):
        run_page(page, tmp_path, dict(os.environ), DOC_ADDRESS)
    page.write_text("```python\nprint(1)\n```\n<!-- example: prints -->\n```text\n2\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="printed"):
        run_page(page, tmp_path, dict(os.environ), DOC_ADDRESS)
    page.write_text("<!-- example: skip -->\n```bash\ntrue\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="must say why"):
        run_page(page, tmp_path, dict(os.environ), DOC_ADDRESS)
