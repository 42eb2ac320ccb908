"""Does the money cap hold in real billing? The mock teacher's own bill under a fault mix, per cap.

Fault mix of issue 12: 10% 503, 5% 429, 2% dropped connections, 2% malformed 200s (the mock bills
every request it answered, the dropped and malformed ones included). For each seed and cap, the
client labels a Sup plan until ``CostCapReached``; the server's ``/usage`` bill is compared with the
cap. ``--compare`` also runs the client with attempt-level accounting switched off (only answered
batches counted, the behaviour before), to show what the conservative accounting prevents.

    .venv/bin/python benchmarks/bench_money_cap.py --seeds 6 --compare
"""

from __future__ import annotations

import argparse
import tempfile

import torch

import ldpclient.teachers.client as client_module
import mock_server
from ldpclient.privacy import laplace
from ldpclient.teachers import CostMeter, QueryClient, connect
from ldpclient.teachers.errors import CostCapReached
from ldpclient.teachers.http import RetryPolicy
from ldpclient.transfer.augment import QueryPlan

CAPS = (0.1, 0.2999, 0.5, 0.777)
FAULTS = dict(error_rate_503=0.1, rate_429=0.05, drop_rate=0.02, malformed_rate=0.02, retry_after=0)
PRICE = 0.001


def run(seeds: int) -> tuple[int, float, int]:
    g = torch.Generator().manual_seed(0)
    release = laplace(2.0, per="element").release(torch.rand(60, 1, 8, 8, generator=g), generator=g)
    plan = QueryPlan("sup", 60, num_queries=1600, seed=2, batch_size=16)
    over, worst, runs = 0, 0.0, 0
    for seed in range(seeds):
        for cap in CAPS:
            with mock_server.serve(
                model="trivial", image_size=8, price_per_image=PRICE, fault_seed=seed, **FAULTS
            ) as srv:
                state = tempfile.mkdtemp()
                teacher = connect(f"{srv.url}/v2/models/digits", state_dir=state,
                                  retry=RetryPolicy(max_attempts=8, initial_wait=0.0, jitter=0.0, sleep=lambda s: None))
                client = QueryClient(
                    teacher, journal=f"{state}/journal.sqlite", cost=CostMeter(price_per_query=PRICE, cap=cap)
                )
                try:
                    for _ in client.label_batches(plan.batches(release)):
                        pass
                except CostCapReached:
                    pass
                billed = srv.usage()["total"]["cost"]
            runs += 1
            over += billed > cap + 1e-9
            worst = max(worst, billed - cap)
    return over, worst, runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("--compare", action="store_true", help="also run without attempt-level accounting")
    args = p.parse_args()
    over, worst, runs = run(args.seeds)
    print(f"conservative accounting: {over}/{runs} runs billed over the cap (worst excess {worst:.4f})")
    if args.compare:
        client_module._AttemptBilling.before_attempt = lambda self, units: None  # type: ignore[method-assign]
        client_module._AttemptBilling.after_attempt = lambda self, outcome, units: None  # type: ignore[method-assign]
        over, worst, runs = run(args.seeds)
        print(f"answered batches only (before): {over}/{runs} runs billed over the cap (worst excess {worst:.4f})")


if __name__ == "__main__":
    main()
