"""Label a folder of private images with `ldpclient label`, end to end, offline.

Runs in about a minute on 2 cores:

    .venv/bin/python examples/label_folder.py [WORKDIR]

1. writes the demo's private data into WORKDIR: ``private/``, 150 digit images (28x28 PNGs from
   scikit-learn's bundled digits, the part the mock teacher never trained on) - stand-ins for your
   private, unlabelled images - and ``check.csv``, the true digits of 100 of them (what you would
   label by hand: read on this device only, never sent);
2. starts the bundled mock teacher on a free loopback port (a paid API: 0.001 per image);
3. runs the real command line, exactly as you would in a shell:

       ldpclient label WORKDIR/private --teacher http://127.0.0.1:PORT/v2/models/digits \\
           --check WORKDIR/check.csv --price 0.001 --money-cap 10 \\
           --state-dir WORKDIR/state --output WORKDIR/labels.csv

4. runs it a second time with ``--epochs 1``: the releases come back from the ledger
   and the teacher's answers from the journal, so nothing is noised or paid again and
   only the student is retrained (the query plan does not depend on the epochs);
5. prints the verdict, the first labels and how many of all 150 match the truth this script kept aside.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import mock_server
from ldpclient.run.demo import write_demo_folder


def main(workdir: Path) -> None:
    truth = write_demo_folder(workdir).truth  # private/ and check.csv; every true digit kept aside here

    with mock_server.serve(model="digits", image_size=28, price_per_image=0.001) as server:
        command = [
            sys.executable, "-m", "ldpclient.cli", "label", str(workdir / "private"),
            "--teacher", server.model_url, "--check", str(workdir / "check.csv"),
            "--price", "0.001", "--money-cap", "10",
            "--state-dir", str(workdir / "state"),
            "--output", str(workdir / "labels.csv"),
        ]
        print("$ ldpclient", " ".join(command[3:]).replace(str(workdir), "WORKDIR"))
        subprocess.run(command, check=True)  # progress bars and the summary go to stderr

        print("\nagain with --epochs 1 (resumes: nothing re-noised, nothing paid twice):")
        again = subprocess.run(
            [*command, "--epochs", "1", "--output", str(workdir / "labels_again.csv"), "--json"],
            check=True, capture_output=True, text=True,
        )
        report = json.loads(again.stdout)
        print(f"  verdict: {report['verdict']['headline']}")
        print(f"  queries sent {report['queries']['sent']}, from the journal {report['queries']['from_journal']}, "
              f"records noised again {report['ledger']['fresh']}, money spent {report['cost']['spent_run']}")
        print(f"  server-side usage: {server.usage()['total']}")

    with (workdir / "labels.csv").open(newline="") as fh:  # the first (5-epoch) run's labels
        rows = list(csv.DictReader(fh))
    print(
        "\nfirst labels:",
        *(f"{r['path']} -> {r['label']} ({float(r['confidence']):.2f})" for r in rows[:3]),
        sep="\n  ",
    )
    correct = sum(int(r["label"]) == truth[r["path"]] for r in rows)
    print(f"accuracy against the truth kept aside: {correct}/{len(rows)} = {correct / len(rows):.1%}")
    print(f"per record epsilon {report['guarantee']['per_record']['epsilon']:.4g} "
          f"(per element {report['guarantee']['per_element']['epsilon']:.4g})")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        target = Path(sys.argv[1])
        target.mkdir(parents=True, exist_ok=True)
        main(target)
    else:
        with tempfile.TemporaryDirectory(prefix="ldpclient-example-") as tmp:
            main(Path(tmp))
