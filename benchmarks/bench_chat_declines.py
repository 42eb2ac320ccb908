"""A chat teacher that says "cannot tell" below a confidence, through the mock's chat API: how many of a label run's
paid queries it declines with and without ``--decode auto``, and the labels' check-set accuracy.

The mock serves its digits CNN as a chat model (``--chat-abstain-below``: "cannot tell" when the top softmax
probability is below it; a decline is billed and carries no label). ``ldpclient label`` runs on the demo's 359
private digits (``write_demo_folder``), beside ``--public``: the teacher's 359 held-out digits (all classes, none
private), at the defaults (the DCT release at 100 per image, 20 Sup queries per image), ``--decode none`` and
``auto``, seeds 1-3, each from an empty state directory; ``--basis dct pca`` also with the release on the public
images' principal components (``label --basis pca``). The decoding's time (fitting the decoder and its check's
queries: the report's ``timings.decode``) is given as a share of the run's wall time, both from the same run::

    .venv/bin/python benchmarks/bench_chat_declines.py --out benchmarks/results/chat_declines.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from typer.testing import CliRunner

import mock_server
from ldpclient.cli.commands import app
from ldpclient.io.datasets import DIGITS_CLASS_NAMES, DIGITS_TEACHER_SPLIT, load_digits_images, split_indices
from ldpclient.run.demo import write_demo_folder, write_private_folder


def _folders(root: Path) -> Path:
    """The demo's private digits and check set, and ``public_all/``: the teacher's held-out digits."""
    write_demo_folder(root, count=None)  # all 359 digits the teacher never saw, as measured
    images, labels = load_digits_images(28)
    _, held_out, _ = split_indices(len(labels), DIGITS_TEACHER_SPLIT, 0)
    write_private_folder(images[held_out], root / "public_all", prefix="public")
    (root / "classes.json").write_text(json.dumps({c: f"the handwritten digit {c}" for c in DIGITS_CLASS_NAMES}))
    return root


def _label(root: Path, url: str, basis: str, decode: str, seed: int) -> dict[str, object]:
    out = root / f"{basis}-{decode}-{seed}"
    t0 = time.perf_counter()
    res = CliRunner().invoke(app, [
        "label", str(root / "private"), "--teacher", f"openai+{url}/v1", "--model", "digits", "--class-names",
        str(root / "classes.json"), "--input-shape", "1,28,28", "--check", str(root / "check.csv"), "--public",
        str(root / "public_all"), "--basis", basis, "--decode", decode, "--seed", str(seed), "--workers", "4",
        "--state-dir", str(out / "state"), "--output", str(out / "labels.csv")])
    wall = time.perf_counter() - t0
    if res.exit_code != 0:
        raise SystemExit(res.output)
    report = json.loads((out / "labels.report.json").read_text())
    decoding = report.get("decoding") or {}
    return {"basis": basis, "decode": decode, "seed": seed, "sent": report["queries"]["sent"],
            "declined": report["queries"]["abstained"], "check_accuracy": report["verdict"]["check"]["accuracy"],
            "chosen": decoding.get("chosen"), "reason": decoding.get("reason"),
            "check_queries": report["counts"].get("decode_check_queries", 0), "wall_s": round(wall, 1),
            "decode_s": report["timings"].get("decode")}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--abstain-below", type=float, default=0.5)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--out", type=Path, default=None, help="JSONL file the runs go to")
    p.add_argument("--basis", nargs="+", default=["dct"], choices=["dct", "pca"],
                   help="the release bases (pca: fitted on the --public images)")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, \
            mock_server.serve(model="digits", image_size=28, chat_abstain_below=args.abstain_below) as srv:
        root = _folders(Path(tmp))
        for seed in args.seeds:
            for basis, decode in ((b, d) for b in args.basis for d in ("none", "auto")):
                row = _label(root, srv.url, basis, decode, seed)
                print(json.dumps(row), flush=True)
                rows.append(row)
    if args.out is not None:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print("\n| --basis | --decode | declined, share of the queries sent | check accuracy | decoder chosen "
          "| decoding, share of the run's time |")
    print("|---|---|---|---|---|---|")
    for basis, decode in ((b, d) for b in args.basis for d in ("none", "auto")):
        mine = [r for r in rows if r["decode"] == decode and r["basis"] == basis]
        shares = [float(r["declined"]) / float(r["sent"]) for r in mine]  # type: ignore[arg-type]
        accuracy = [float(r["check_accuracy"]) for r in mine]  # type: ignore[arg-type]
        chosen = sum(r["chosen"] is True for r in mine)
        spent = [float(r["decode_s"] or 0) / float(r["wall_s"]) for r in mine]  # type: ignore[arg-type]
        print(f"| {basis} | {decode} | {_ms(shares)} | {_ms(accuracy)} | "
              f"{chosen if decode == 'auto' else '-'} of {len(mine)} | {_ms(spent)} |")


def _ms(values: list[float]) -> str:
    return (f"{100 * statistics.mean(values):.1f} ± {100 * statistics.stdev(values):.1f} %" if len(values) > 1
            else f"{100 * values[0]:.1f} %")


if __name__ == "__main__":
    main()
