"""Peak memory of the LDPKiT query path at scale: Q queries of 28x28 records.

n private 28x28 records -> Laplace release -> blur + clip -> QueryPlan (Sup by
default) -> batches streamed to an in-process synthetic teacher (a fixed random
linear layer) -> labels kept in a LabelStore (int8 per query) -> optionally one
training epoch over the first ``--train-queries`` queries. Prints the peak
resident set size (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) before and after.

    nice -n 10 .venv/bin/python benchmarks/bench_scale.py --queries 500000
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import torch

from ldpclient.privacy import laplace
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer.augment import QueryPlan
from ldpclient.transfer.postprocess import apply_all, parse_postprocess
from ldpclient.transfer.student import LabelStore, Trainer, small_cnn


def peak_rss_mb() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / 2**20


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queries", type=int, default=500_000)
    p.add_argument("--records", type=int, default=2000)
    p.add_argument("--kind", choices=["sup", "rand"], default="sup")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--train-queries", type=int, default=20_000, help="one epoch over this many (0 = no training)")
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    start_rss = peak_rss_mb()
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(0)
    records = torch.rand(args.records, 1, 28, 28, generator=g)
    mech = laplace(1.0)
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
