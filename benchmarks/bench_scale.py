"""Peak memory and time at scale: growing Q (in process) and growing n (through ``ldpclient label``).

**Growing n** (``--records N [N ...]``): writes N synthetic 28x28 grey PNGs to disk
(1,000 per sub-folder, cached under ``--work``), starts the mock teacher
(``--model trivial``, a subprocess on 127.0.0.1) and runs ``ldpclient label`` on the
folder in a fresh process with the defaults and ``--queries``; prints the wall time,
seconds per 1,000 records, the client's own peak RSS (``VmHWM`` of the label process)
and the stages' seconds from the run report. Targets (issue 13): 50,000 records
< 1.2 GB; 1,000,000 with ``--queries 20000`` < 2 GB and time linear in n.

    nice -n 10 .venv/bin/python benchmarks/bench_scale.py --records 10000 50000 --queries 20000

With ``--units`` each label run's wall time and its adaptation are also given in *units*: one unit is a fixed raw
torch workload timed right after the run in the same process tree (:func:`unit_seconds`: one epoch of a width-32
small CNN, ``small_cnn`` as issue 88 timed it (:func:`unit_network`), over 5,000 28x28 samples at batch 32 with
Adam, plus its predictions over 12,500, NCHW, on every core), so that runs on machines of different speeds and
heads of different students compare.

**Growing Q** (default): n private 28x28 records -> Laplace release -> blur + clip -> QueryPlan (Sup by
default) -> batches streamed to an in-process synthetic teacher (a fixed random
linear layer) -> labels kept in a LabelStore (int8 per query) -> optionally one
training epoch over the first ``--train-queries`` queries. Prints the peak
resident set size (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) before and after.

    nice -n 10 .venv/bin/python benchmarks/bench_scale.py --queries 500000
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from peak_rss import cli_command, peak_rss_kb  # noqa: E402

from ldpclient.privacy import laplace
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer.augment import QueryPlan
from ldpclient.transfer.postprocess import apply_all, parse_postprocess
from ldpclient.transfer.student import LabelStore, Trainer, small_cnn


def peak_rss_mb() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / 2**20




def write_images(folder: Path, n: int, side: int = 28) -> Path:
    """``n`` synthetic grey ``side`` x ``side`` PNGs (a bright square at a random place on noise), cached."""
    from PIL import Image

    done = folder / f".complete-{n}"
    if done.exists():
        return folder
    rng = np.random.default_rng(0)
    for start in range(0, n, 1000):
        sub = folder / f"{start // 1000:04d}"
        sub.mkdir(parents=True, exist_ok=True)
        count = min(1000, n - start)
        imgs = rng.integers(0, 64, (count, side, side), dtype=np.uint8)
        corner = rng.integers(0, side // 2, (count, 2))
        for k in range(count):
            r, c = corner[k]
            imgs[k, r : r + side // 2, c : c + side // 2] = 200
            Image.fromarray(imgs[k]).save(sub / f"{k:03d}.png")
    done.touch()
    return folder


def label_at_scale(n: int, queries: int, work: Path, extra: list[str]) -> dict:
    """One ``ldpclient label`` run over ``n`` images on disk; wall seconds, peak RSS (MB), stage seconds."""
    from mock_server.runner import start

    folder = write_images(work / f"images-{n}", n)
    run = time.time_ns()
    state = work / f"state-{n}-{run}"
    out = work / f"out-{n}-{run}" / "labels.csv"  # outputs never go into the state directory
    out.parent.mkdir(parents=True)
    with start(subprocess=True, model="trivial", image_size=28, channels=1, num_classes=10) as srv:
        t0 = time.perf_counter()
        proc = subprocess.run(
            cli_command("label", str(folder), "--teacher", srv.model_url, "--state-dir", str(state),
                        "--output", str(out), "--queries", str(queries), "--quiet", *extra),
            capture_output=True, text=True,
        )
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"label failed at n={n} (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    report = json.loads((out.parent / "labels.report.json").read_text())
    return {"n": n, "wall": wall, "peak_mb": peak_rss_kb(proc.stderr) / 1024, "timings": report.get("timings", {}),
            "elements": int(report["guarantee"]["elements_per_record"])}


def _decode_raw(paths: list[str]) -> int:
    from PIL import Image

    for path in paths:
        with Image.open(path) as img:
            np.asarray(img)
    return len(paths)


def warm_page_cache(folder: Path) -> float:
    """Read every file under ``folder`` once, so that the label run's loading and the raw loop after it both
    read from the page cache (a first read from disk would otherwise count against the label run alone);
    the seconds it took."""
    import os

    t0 = time.perf_counter()
    for top, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(top, name), "rb") as f:
                f.read()
    return time.perf_counter() - t0


def raw_loading(folder: Path) -> float:
    """Seconds for a bare loop that decodes the folder's PNGs with Pillow, one process per core."""
    import multiprocessing

    from ldpclient.io.folders import available_cores

    files = sorted(str(p) for p in folder.rglob("*.png"))
    cores = available_cores()
    runs = [files[s : s + 1024] for s in range(0, len(files), 1024)]
    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(cores) as pool:
        assert sum(pool.map(_decode_raw, runs)) == len(files)
    return time.perf_counter() - t0


def raw_prediction(records: int, passes_records: int) -> float:
    """Seconds a bare ``model(x)`` loop (small_cnn, NCHW, ``torch.inference_mode``, batches of 512 in memory)
    takes for ``passes_records`` records: timed over ``min(records, 50,000)`` records and scaled."""
    from ldpclient.io.folders import available_cores

    torch.set_num_threads(available_cores())
    model = small_cnn(num_classes=10, in_channels=1, image_size=28).eval()
    m = min(records, 50_000)
    x = torch.rand(m, 1, 28, 28)
    with torch.inference_mode():
        model(x[:512])  # warm-up
        t0 = time.perf_counter()
        for s in range(0, m, 512):
            model(x[s : s + 512])
        per_record = (time.perf_counter() - t0) / m
    return per_record * passes_records


def raw_noising(records: int, elements: int, chunk: int = 2**21 // 784) -> float:
    """Seconds to draw ``records x elements`` secure discrete Laplace values (``elements``: what the run released
    per record, 64 DCT coefficients at the defaults; the defaults' per-element scale)
    and store each chunk's rows in one SQLite transaction (a 32-byte key and the float32 values per record)."""
    import os
    import sqlite3
    import tempfile

    from ldpclient.privacy.sampling import discrete_laplace_sampler

    sampler = discrete_laplace_sampler(1024 / (100 / elements))  # b = 1/eps_elem on a 1/1024 grid
    gen = torch.Generator().manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        con = sqlite3.connect(os.path.join(tmp, "raw.sqlite"), isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE r (k BLOB PRIMARY KEY, v BLOB)")
        t0 = time.perf_counter()
        for start in range(0, records, chunk):
            k = min(chunk, records - start)
            values = sampler.sample((k, elements), gen).to(torch.float32).numpy()
            con.execute("BEGIN")
            rows = [((start + i).to_bytes(32, "big"), values[i].tobytes()) for i in range(k)]
            con.executemany("INSERT INTO r VALUES (?, ?)", rows)
            con.execute("COMMIT")
        seconds = time.perf_counter() - t0
        con.close()
    return seconds


#: The unit of :func:`unit_seconds`: samples of one training epoch, its batch, and samples predicted after it.
UNIT_TRAIN, UNIT_BATCH, UNIT_PREDICT = 5_000, 32, 12_500


def unit_network() -> torch.nn.Module:
    """The unit's network, fixed here whatever the library's students become: the small CNN as issue 88 timed it
    (``small_cnn`` at f6a07f0: width 32, 28x28 grey images, each ReLU before its max-pool, 10 classes)."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(3),
        nn.Flatten(), nn.Linear(64 * 9, 128), nn.ReLU(inplace=True), nn.Dropout(0.25), nn.Linear(128, 10),
    )


def unit_seconds() -> float:
    """Seconds of one unit of raw torch work on this machine now: one epoch of :func:`unit_network` over
    :data:`UNIT_TRAIN` random 28x28 samples at batch :data:`UNIT_BATCH` (torch's Adam, cross-entropy), then
    predictions over :data:`UNIT_PREDICT` in batches of 512 under ``torch.inference_mode``; NCHW, one thread per
    core."""
    from ldpclient.io.folders import available_cores

    torch.set_num_threads(available_cores())
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = unit_network()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.rand(UNIT_PREDICT, 1, 28, 28, generator=g), torch.randint(0, 10, (UNIT_TRAIN,), generator=g)
    loss_fn = torch.nn.CrossEntropyLoss()
    t0 = time.perf_counter()
    model.train()
    for s in range(0, UNIT_TRAIN, UNIT_BATCH):
        end = min(s + UNIT_BATCH, UNIT_TRAIN)
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x[s:end]), y[s:end]).backward()
        opt.step()
    model.eval()
    with torch.inference_mode():
        for s in range(0, UNIT_PREDICT, 512):
            model(x[s : s + 512])
    return time.perf_counter() - t0


def prediction_records(n: int, rounds: int = 3, sample: int = 50_000) -> int:
    """Records the defaults predict on: up to the sample size, the unadapted pass, the later rounds and the
    last pass over all n; above it, every round over the sample and only the last pass over all n."""
    return (rounds + 1) * n if n <= sample else rounds * sample + n


def grow_n(args: argparse.Namespace) -> None:
    work = Path(args.work)
    print(f"{'records':>9} {'wall s':>8} {'s/1k':>6} {'peak RSS MB':>12}  stages (s)")
    for n in args.records:
        if args.raw:
            warm = warm_page_cache(write_images(work / f"images-{n}", n))
            print(f"{'':>9} read every file once before the run (page cache): {warm:.1f} s", flush=True)
        r = label_at_scale(n, args.queries, work, args.label_args.split())
        stages = ", ".join(f"{k} {v:.0f}" for k, v in r["timings"].items() if isinstance(v, (int, float)))
        print(f"{n:>9} {r['wall']:>8.0f} {1000 * r['wall'] / n:>6.2f} {r['peak_mb']:>12.0f}  {stages}", flush=True)
        if args.units:
            unit = min(unit_seconds() for _ in range(3))
            t = r["timings"]
            adapting = t.get("adapting", 0.0)  # its prediction passes (adapting_predict) are a part of it
            print(f"{'':>9} one unit {unit:.2f} s (best of 3): the run {r['wall'] / unit:.1f} units, adaptation with "
                  f"its predictions {adapting / unit:.1f} units ({adapting:.1f} s, {100 * adapting / r['wall']:.0f} % "
                  "of the run)", flush=True)
        if args.raw:
            t = r["timings"]
            raw = {"loading": raw_loading(work / f"images-{n}"), "noising": raw_noising(n, r["elements"]),
                   "predicting": raw_prediction(n, prediction_records(n))}
            got = {"loading": t.get("loading", 0.0), "noising": t.get("noising", 0.0),
                   "predicting": t.get("adapting_predict", t.get("adapt_predict", 0.0)) + t.get("labelling", 0.0)}
            rows = ", ".join(f"{k} {got[k]:.1f}/{raw[k]:.1f} = {got[k] / raw[k]:.2f}x" for k in raw)
            total = sum(got.values()) / sum(raw.values())
            print(f"{'':>9} against raw (run/raw s): {rows}; these stages together {total:.2f}x; "
                  f"the rest (training, fine-tuning, querying) {r['wall'] - sum(got.values()):.0f} s", flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queries", type=int, default=500_000)
    p.add_argument("--records", type=int, nargs="+", default=[2000],
                   help="growing Q: one n (in memory); several or with --on-disk: label runs over n images on disk")
    p.add_argument("--on-disk", action="store_true", help="run ldpclient label over --records images on disk")
    p.add_argument("--work", default="/tmp/ldpclient-bench-scale", help="where the images and state go (cached)")
    p.add_argument("--label-args", default="", help="extra options for ldpclient label, e.g. '--no-adapt'")
    p.add_argument("--raw", action="store_true",
                   help="after each label run, time the raw baselines of loading, noising and prediction "
                        "(the files are read once before the run, so both loadings find them in the page cache)")
    p.add_argument("--units", action="store_true",
                   help="after each label run, time the unit workload (unit_seconds) and give the run in units")
    p.add_argument("--kind", choices=["sup", "rand"], default="sup")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--train-queries", type=int, default=20_000, help="one epoch over this many (0 = no training)")
    args = p.parse_args(argv)
    if args.on_disk or len(args.records) > 1:
        grow_n(args)
        return
    args.records = args.records[0]
    torch.set_num_threads(2)
    start_rss = peak_rss_mb()
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(0)
    records = torch.rand(args.records, 1, 28, 28, generator=g)
    mech = laplace(1.0, per="element")
    source = apply_all(mech.release(records, generator=g), parse_postprocess("blur:2,clip"))
    plan = QueryPlan(args.kind, args.records, num_queries=args.queries, seed=0, batch_size=args.batch_size)
    w = torch.randn(784, 10, generator=g)
    teacher = LocalTeacher(lambda x: x.reshape(len(x), -1) @ w, (1, 28, 28), 10, name="synthetic")
    store = LabelStore(plan.total, 10)
    for _bid, d in plan.batches(source, mechanism=mech):
        store.set(d.ids.numpy(), teacher.classify(d).numpy())
    t_label = time.perf_counter() - t0
    print(f"labelled {store.num_labelled} {args.kind} queries from n={args.records} in {t_label:.1f}s "
          f"({store.num_labelled / t_label:.0f} queries/s); labels take {store.labels.nbytes / 2**20:.2f} MiB")
    print(f"peak RSS after labelling: {peak_rss_mb():.0f} MB (at start {start_rss:.0f} MB)")
    if args.train_queries:
        sub = -(-args.train_queries // args.batch_size)

        def stream(epoch):
            for _, d in plan.batches(source, mechanism=mech, order=range(sub)):
                yield d.ids.numpy(), d.values

        t1 = time.perf_counter()
        hist = Trainer(small_cnn(num_classes=10, width=16), epochs=1, val_fraction=0.0, device="cpu").fit(stream, store)
        print(f"1 epoch over {hist.images} queries: {time.perf_counter() - t1:.1f}s")
    print(f"peak RSS (ru_maxrss): {peak_rss_mb():.0f} MB for Q={plan.total} queries of 28x28 records")


if __name__ == "__main__":
    main()
