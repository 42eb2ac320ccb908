"""README.md as a newcomer runs it: after ``make demo``, in a new shell whose PATH knows nothing of the
project, the README's command blocks in order, as written: the activation step it shows, ``ldpclient label`` on the
demo's folder and check set against a teacher that is up, the embedding example with the ``python`` the activation
put first, and the mock teacher's own command found. Every run report they write must carry the verdict "usable", as
tests/test_docs.py checks the other pages' examples (it runs them one by one, with the environment's ``bin`` on
PATH)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mock_server
from ldpclient.run.demo import write_demo_folder
from support.doc_examples import DOC_ADDRESS, ROOT, examples, verdicts_written

#: Runs of the README before the test fails on a verdict other than "usable" (tests/test_docs.py's VERDICT_TRIES: a
#: verdict is a statistical judgement of labels made from fresh noise).
VERDICT_TRIES = 2


def test_the_readme_runs_in_order_in_a_new_shell_after_make_demo(tmp_path: Path, teacher_cache: Path) -> None:
    blocks = examples(ROOT / "README.md")
    activation = [b for b in blocks if b.lang == "bash" and "activate" in b.body]
    assert len(activation) == 1, "the README shows how a new shell finds ldpclient"
    runnable = [b for b in blocks if b.kind not in ("skip", "prints", "server") and b.lang in ("bash", "python")]
    assert [b.lang for b in runnable] == ["bash", "python"]  # `ldpclient label`, then the embedding example
    for again in range(VERDICT_TRIES):
        where = tmp_path / f"try{again}"
        where.mkdir()
        stdout, written = _readme_in_a_new_shell(where, activation[0].body, runnable, teacher_cache)
        usable = all(level == "usable" for _, level in written) and stdout.split(":")[0].split(",")[0] == "usable"
        if usable or again == VERDICT_TRIES - 1:
            break
    assert [name for name, _ in written] == ["labels.report.json"]  # the embedding example writes no files
    assert all(level == "usable" for _, level in written), written
    assert stdout.split(":")[0].split(",")[0] == "usable"  # the embedding example's verdict


def _readme_in_a_new_shell(tmp_path: Path, activation: str, runnable: list, teacher_cache: Path) -> tuple[str, list]:
    """The README's blocks run in ``tmp_path`` after what ``make demo`` wrote: the embedding example's first line
    and the run reports written, with their verdicts."""
    venv = Path(sys.executable).parent.parent
    (tmp_path / ".venv").symlink_to(venv)  # the checkout's environment, as `make demo` left it
    write_demo_folder(tmp_path / "out")  # what `make demo` wrote: out/private, out/check.csv
    (tmp_path / "home").mkdir()
    with mock_server.serve(model="digits", image_size=28, seed=0, state_dir=str(teacher_cache)) as srv:
        script = ["set -euo pipefail", activation]
        for block in runnable:
            body = block.body.replace(DOC_ADDRESS, f"127.0.0.1:{srv.port}")
            script.append(body if block.lang == "bash" else f"python - <<'README_PYTHON'\n{body}README_PYTHON")
        script.append("ldpclient serve-mock --help > /dev/null  # the teacher's command of the text is found too")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8",
               **{k: os.environ[k] for k in ("TMPDIR", "OMP_NUM_THREADS") if k in os.environ}}
        done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=240)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert (tmp_path / "labels.csv").exists() and (tmp_path / "labels.html").exists()
    return (done.stdout.splitlines() or [""])[0], verdicts_written(tmp_path, {})
