"""Embed ldpclient in an application: the Python API behind `ldpclient label`.

    .venv/bin/python examples/embed_in_app.py

Your application already holds the private images as a tensor (here: 100 digits
the mock teacher never saw). It wires the same pieces the CLI uses:

* a mechanism (`make_mechanism`), whose guarantee is known before any data is touched;
* a `Ledger` (per-record privacy spend, cap checked before sampling, releases reused);
* a teacher (`connect`) behind a `QueryClient` (batching, retries, money cap, journal);
* `KnowledgeTransfer`, which releases, expands (LDPKiT-Sup), queries, trains and labels.

Labels come back as tensors; nothing is written except the ledger and journal.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

import mock_server
from ldpclient.io.datasets import DIGITS_TEACHER_SPLIT, load_digits_images, split_indices
from ldpclient.privacy import Domain, Ledger, make_mechanism
from ldpclient.teachers import CostMeter, Journal, QueryClient, connect
from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.settings import PlanSettings, TrainingSettings


def show_progress(stage: str, done: int, total: int, metrics: dict) -> None:
    """The pipeline's progress callback: stages release, label, train, epoch, predict."""
    if stage == "epoch":
        print(f"  epoch {done}/{total}: loss {metrics['loss']:.3f}, train accuracy {metrics['train_acc']:.1%}")
    elif stage in ("release", "label", "predict") and done == total:
        print(f"  {stage}: {done}/{total} done")


def label_private_images(records: torch.Tensor, teacher_url: str, state: Path, epochs: int = 5) -> torch.Tensor:
    """Labels for ``records`` (float (N, 1, 28, 28) in [0, 1]); raw pixels never leave this function."""
    teacher = connect(teacher_url)  # token: connect(url, token=...) or $LDPCLIENT_TOKEN
    meta = teacher.metadata()
    mechanism = make_mechanism(
        "laplace", epsilon=4.0, per="element", reduction=4, domain=Domain(*meta.value_range)
    )
    g = mechanism.guarantee(meta.input_shape)
    print(f"before touching data: {g.summary()}")

    with Ledger(state / "ledger.sqlite", cap_epsilon=500.0) as ledger, QueryClient(
        teacher,
        journal=Journal(state / "journal.sqlite"),
        cost=CostMeter(price_per_query=0.001, cap=2.0),
    ) as client:
        transfer = KnowledgeTransfer(
            teacher,
            mechanism,
            ledger=ledger,
            client=client,
            seed=1234,  # query-plan seed: keep it to resume (the noise itself is CSPRNG-seeded)
            progress=show_progress,
            plan=PlanSettings(augment="sup", num_queries=1500, postprocess="clip,blur"),
            training=TrainingSettings(epochs=epochs, batch_size=32),
        )
        result = transfer.run(records)
        print(f"queries sent {client.stats.queries_sent}, spent {client.cost.spent_run:.3f}")
        print(f"records noised now {result.counts['releases_fresh']}, reused {result.counts['releases_reused']}")
    return result.labels


def main() -> None:
    images, labels = load_digits_images(28)
    unseen = split_indices(len(labels), DIGITS_TEACHER_SPLIT, seed=0)[2][:100]
    records, truth = images[unseen], labels[unseen]
    with tempfile.TemporaryDirectory() as tmp, mock_server.serve(model="digits", image_size=28) as server:
        state = Path(tmp)
        predicted = label_private_images(records, server.model_url, state)
        print(f"accuracy against the truth: {(predicted == truth).float().mean():.1%}")
        print("again, same state (resumes: nothing noised again, nothing paid again; 1 epoch to be quick):")
        label_private_images(records, server.model_url, state, epochs=1)


if __name__ == "__main__":
    main()
