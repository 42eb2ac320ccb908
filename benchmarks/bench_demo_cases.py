"""The demo's cases, chosen by measurement (issue 87): how much each candidate case's private run gains over its
data-free run, and how often the run's verdict calls that a measurable gain, over repeated runs (the release noise
and the training are new each run, as in ``make demo``).

Each run is ``ldpclient.run.label.label_run`` with the demo's settings (the label defaults, the mock ``digits``
teacher at 0.001 a query, ``--baseline``) on a folder of scikit-learn digits at 28x28 the teacher never trained on,
with the true digits of the first 100 as the check set:

* ``--private N``: the first N of the 359 digits the teacher never saw (all ten digits);
* ``--private-classes 0,1``: only those digits, from the ones it never saw, and with ``--held`` from its held-out
  part too (the teacher never trained on either);
* ``--public-classes 0,1,2,3,4 --public 150``: beside that many of its held-out digits of those classes as
  ``--public`` images (the demo's second case before issue 87); ``--public 0``: none.

One row per run: the accuracy of the private run's labels and of the data-free run's against the truth (all images,
in %), the gain, the verdict's ``privacy_bought`` and level, and the run's seconds. ``--folder-sizes N,...`` instead
runs the label defaults without a baseline on the first N digits (``--epochs`` to change them) and records the
verdict: which folder the page examples can be run on and still be usable every time.

    .venv/bin/python benchmarks/bench_demo_cases.py --private 150 --public 0 --repeats 12 --tag alone150
    .venv/bin/python benchmarks/bench_demo_cases.py --private-classes 0,1 --held --public 0 --repeats 10 --tag two
    .venv/bin/python benchmarks/bench_demo_cases.py --private-classes 0,1 --held --public 0 --repeats 16 \\
        --queries 5360 --tag two-q40
    .venv/bin/python benchmarks/bench_demo_cases.py --folder-sizes 100,120,150 --repeats 8
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

import mock_server
from ldpclient.io.datasets import DIGITS_TEACHER_SPLIT, load_digits_images, split_indices
from ldpclient.report.label_files import read_labels
from ldpclient.report.run_report import RunReport
from ldpclient.run.demo import CHECK_IMAGES, DEMO_PRICE, write_check_file, write_demo_folder, write_private_folder
from ldpclient.run.label import LabelOptions, label_run

OUT = Path(__file__).resolve().parent / "results" / "demo_cases.jsonl"


def _classes(text: str) -> list[int]:
    return [int(c) for c in text.split(",")] if text else []


def _case_run(args: argparse.Namespace, teacher: str, images: torch.Tensor, labels: torch.Tensor,
              private: torch.Tensor, public: torch.Tensor) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="demo-case-"))
    names = write_private_folder(images[private], root / "private")
    truth = {name: int(labels[i]) for name, i in zip(names, private.tolist(), strict=True)}
    write_check_file(root / "check.csv", {name: truth[name] for name in names[:CHECK_IMAGES]})
    if len(public):
        write_private_folder(images[public], root / "public", prefix="public")
    opts = LabelOptions(private_dir=root / "private", teacher=teacher, price=DEMO_PRICE, state_dir=root / "state",
                        queries=args.queries, baseline=True, output=root / "labels.csv", check=root / "check.csv",
                        public=(root / "public") if len(public) else None,
                        **({"epochs": args.epochs} if args.epochs else {}))
    started = time.perf_counter()
    report = RunReport.from_dict(label_run(opts).report)
    seconds = time.perf_counter() - started

    def accuracy(path: Path) -> float:
        return 100 * sum(r.label == truth[r.path] for r in read_labels(path)) / len(truth)

    private_acc, free_acc = accuracy(root / "labels.csv"), accuracy(Path(report.outputs["baseline_labels"]))
    verdict = report.verdict or {}
    return {"tag": args.tag, "n_private": len(private), "private_classes": args.private_classes or "all",
            "held_out_too": args.held, "public": len(public), "public_classes": args.public_classes,
            "queries": args.queries, "epochs": args.epochs, "private_acc": round(private_acc, 1),
            "free_acc": round(free_acc, 1), "gain": round(private_acc - free_acc, 1),
            "bought": verdict.get("privacy_bought"), "level": verdict.get("level"), "seconds": round(seconds, 1)}


def _folder_run(args: argparse.Namespace, teacher: str, n: int) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="demo-folder-"))
    write_demo_folder(root, count=n)
    opts = LabelOptions(private_dir=root / "private", teacher=teacher, state_dir=root / "state",
                        output=root / "labels.csv", check=root / "check.csv",
                        **({"epochs": args.epochs} if args.epochs else {}))
    started = time.perf_counter()
    verdict = label_run(opts).report["verdict"]
    return {"tag": args.tag, "folder": n, "epochs": args.epochs, "level": verdict["level"],
            "check_accuracy": round(100 * verdict["check"]["accuracy"], 1),
            "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--private", type=int, default=359, help="at most this many private digits")
    ap.add_argument("--private-classes", default="", help="only these digits (comma-separated)")
    ap.add_argument("--held", action="store_true", help="the teacher's held-out digits of those classes too")
    ap.add_argument("--public-classes", default="0,1,2,3,4")
    ap.add_argument("--public", type=int, default=150, help="public digits of --public-classes (0: none)")
    ap.add_argument("--queries", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--folder-sizes", default="", help="instead: label the first N digits, for each N")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tag", default="")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    images, labels = load_digits_images(28)
    _, held, unseen = split_indices(len(labels), DIGITS_TEACHER_SPLIT, 0)
    pool = torch.cat([unseen, held]) if args.held else unseen
    if args.private_classes:
        pool = pool[torch.isin(labels[pool], torch.tensor(_classes(args.private_classes)))]
    private = pool[: args.private]
    public = held[torch.isin(labels[held], torch.tensor(_classes(args.public_classes)))][: args.public]
    with mock_server.serve(model="digits", image_size=28, seed=0, price_per_image=DEMO_PRICE) as server:
        for _ in range(args.repeats):
            if args.folder_sizes:
                rows = [_folder_run(args, server.model_url, int(n)) for n in args.folder_sizes.split(",")]
            else:
                rows = [_case_run(args, server.model_url, images, labels, private, public)]
            with args.out.open("a", encoding="utf-8") as fh:
                for row in rows:
                    print(json.dumps(row), flush=True)
                    fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
