"""The pages of a large run: size on disk and time to open in headless Chromium (issue 34).

Runs ``ldpclient label --html --baseline`` over ``--records`` synthetic 28x28 PNGs on disk (the folder
``bench_scale.py`` writes and caches, the mock teacher's ``trivial`` model in a subprocess), then
``ldpclient budget --html --privacy-cap 100 --private FOLDER`` on the same ledger (every file hashed
to name the images at the cap), and opens each page ``--repeat`` times in headless Chromium over the
DevTools pipe (``tests/browser.py``), beside a one-line page as the browser's own floor. Prints the
bytes of each page, the seconds from navigation to the load event, whether every image decoded, and the
requests that were not ``data:``/``file:`` (there must be none). Targets: a 50,000-image run's page
opens in under 2 s and stays under 5 MB.

    nice -n 2 .venv/bin/python benchmarks/bench_html.py --records 50000
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[0] / "tests" / "support"))
from bench_scale import write_images  # noqa: E402
from browser import open_page  # noqa: E402
from peak_rss import cli_command  # noqa: E402

CHECK = """JSON.stringify({images: Array.from(document.images).map(i => i.complete && i.naturalWidth > 0),
                        charts: document.querySelectorAll('svg').length})"""


def run(command: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{command[:4]} failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return time.perf_counter() - t0


def measure(page: Path, repeat: int) -> dict:
    loads, visit = [], None
    for _ in range(repeat):
        visit = open_page(page, CHECK)
        loads.append(visit.load_seconds)
    assert visit is not None
    seen = json.loads(visit.value)
    return {"bytes": page.stat().st_size, "load_s": loads, "median_s": statistics.median(loads),
            "images": len(seen["images"]), "decoded": all(seen["images"]), "charts": seen["charts"],
            "fetched": [u for u in visit.requests if not u.startswith(("data:", "file:"))]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=50_000)
    p.add_argument("--queries", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--work", default="/tmp/ldpclient-bench-scale", help="where the images and state go (cached)")
    args = p.parse_args()
    from mock_server.runner import start

    work = Path(args.work)
    folder = write_images(work / f"images-{args.records}", args.records)
    state = work / f"state-html-{args.records}-{time.time_ns()}"
    out = state / "labels.csv"
    with start(subprocess=True, model="trivial", image_size=28, channels=1, num_classes=10) as srv:
        label_s = run(cli_command("label", str(folder), "--teacher", srv.model_url, "--state-dir", str(state),
                                  "--output", str(out), "--queries", str(args.queries), "--quiet", "--html",
                                  "--baseline"))
    budget_page = state / "budget.html"
    budget_s = run(cli_command("budget", "--state-dir", str(state), "--privacy-cap", "100", "--html",
                               str(budget_page), "--private", str(folder), "--json"))
    floor = state / "floor.html"
    floor.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'><title>x</title></head><body>x</body></html>")
    rows = {"one-line page": measure(floor, args.repeat),
            "label --html": measure(state / "labels.html", args.repeat),
            "budget --html --private": measure(budget_page, args.repeat)}
    print(f"records {args.records}: label --html --baseline {label_s:.1f} s, budget --html --private {budget_s:.1f} s")
    print(f"{'page':<26}{'bytes':>11}{'open s (median)':>17}  {'each':<22}{'images':>7}  decoded  charts  fetched")
    for name, r in rows.items():
        each = ", ".join(f"{s:.3f}" for s in r["load_s"])
        print(f"{name:<26}{r['bytes']:>11,}{r['median_s']:>17.3f}  {each:<22}{r['images']:>7}  {str(r['decoded']):<7}"
              f"  {r['charts']:>6}  {len(r['fetched'])}")


if __name__ == "__main__":
    main()
