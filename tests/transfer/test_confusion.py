"""The teacher's confusion on noised queries, measured on public images, and training through it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ldpclient.privacy import laplace
from ldpclient.teachers.local import LocalTeacher
from ldpclient.transfer import defaults
from ldpclient.transfer.confusion import Confusion, estimate_confusion, forward_corrected_log_probs
from ldpclient.transfer.pipeline import KnowledgeTransfer
from ldpclient.transfer.settings import PlanSettings, TrainingSettings
from ldpclient.transfer.student import LabelStore, Trainer, small_cnn

TRUE = np.array([[0.6, 0.1, 0.3], [0.1, 0.2, 0.7], [0.05, 0.05, 0.9]])  # a teacher that answers noise with "2"


def _answers(classes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.array([rng.choice(3, p=TRUE[c]) for c in classes])


def test_single_image_queries_give_the_row_normalised_counts() -> None:
    rng = np.random.default_rng(0)
    first = rng.integers(0, 3, 6_000)
    matrix = estimate_confusion(3, _answers(first, rng), first)
    assert np.allclose(matrix.sum(1), 1.0) and np.abs(matrix - TRUE).max() < 0.03
    counted = estimate_confusion(3, np.array([0, 0, 1]), np.array([0, 0, 0]), prior_strength=0.0)
    assert counted[0].tolist() == pytest.approx([2 / 3, 1 / 3, 0.0])


def test_em_recovers_the_confusion_from_pairs_whose_answer_comes_from_either_member() -> None:
    rng = np.random.default_rng(1)
    first, second = rng.integers(0, 3, 20_000), rng.integers(0, 3, 20_000)
    pick = rng.random(20_000) < 0.5
    answers = _answers(np.where(pick, first, second), rng)
    matrix = estimate_confusion(3, answers, first, second)
    assert np.abs(matrix - TRUE).max() < 0.04
    naive = estimate_confusion(3, answers, first)  # reading each answer as the first member's alone is far off
    assert np.abs(naive - TRUE).max() > 0.15


def test_a_class_without_images_keeps_the_overall_answer_shares_and_bad_input_is_refused() -> None:
    first = np.array([0, 0, 1, 1])
    matrix = estimate_confusion(3, np.array([0, 2, 1, 2]), first)
    assert np.all(matrix > 0) and matrix[2].tolist() == pytest.approx([2 / 7, 2 / 7, 3 / 7])
    with pytest.raises(ValueError, match="differ in length"):
        estimate_confusion(3, np.array([0, 1]), np.array([0]))
    with pytest.raises(ValueError, match="out of range"):
        estimate_confusion(3, np.array([0, 3]), np.array([0, 1]))
    assert Confusion(np.eye(3), 10, [4, 3, 3]).informativeness == pytest.approx(2 / 3)
    assert Confusion(np.full((3, 3), 1 / 3), 10, [4, 3, 3]).informativeness == pytest.approx(0.0)


def test_the_forward_corrected_probabilities_are_the_students_read_through_the_confusion() -> None:
    logits = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    log_m = torch.log(torch.as_tensor(TRUE, dtype=torch.float32))
    expected = torch.log(torch.softmax(logits, 1) @ torch.as_tensor(TRUE, dtype=torch.float32))
    log_p = torch.log_softmax(logits, 1)
    assert torch.allclose(forward_corrected_log_probs(log_p, log_m), expected, atol=1e-6)
    assert torch.allclose(forward_corrected_log_probs(log_p, torch.log(torch.eye(3))), log_p)


def _trained_weights(confusion: np.ndarray | None, noised: bool) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(64, 1, 8, 8, generator=g), torch.randint(0, 3, (64,), generator=g)
    store = LabelStore(64, 3)
    store.set(np.arange(64), y.numpy())
    torch.manual_seed(0)
    model = small_cnn(num_classes=3, in_channels=1, image_size=8, width=4)
    trainer = Trainer(model, epochs=1, batch_size=16, val_fraction=0.0, device="cpu", confusion=confusion,
                      noised=lambda ids: np.full(len(ids), noised))
    trainer.fit(lambda epoch: [(np.arange(64), x)], store)
    return [p.detach().clone() for p in trainer.model.parameters()]


def _same(first: list[torch.Tensor], second: list[torch.Tensor]) -> bool:
    return all(torch.allclose(a, b, atol=1e-5) for a, b in zip(first, second, strict=True))


def test_clean_rows_and_an_identity_confusion_train_exactly_as_the_plain_loss() -> None:
    plain = _trained_weights(None, True)
    for confusion, noised in ((TRUE, False), (np.eye(3) * (1 - 2e-7) + 1e-7, True)):
        assert _same(plain, _trained_weights(confusion, noised))
    assert not _same(plain, _trained_weights(TRUE, True))


class _Counting(LocalTeacher):
    """A LocalTeacher that counts the images it classified."""

    classified = 0

    def classify(self, batch):  # type: ignore[no-untyped-def]
        type(self).classified += len(batch)
        return super().classify(batch)


def test_a_run_measures_the_confusion_on_noised_public_images_pays_its_queries_and_charges_nothing(tmp_path) -> None:
    from ldpclient.privacy import Ledger

    teacher = _Counting(lambda x: (x.reshape(len(x), -1).mean(1) > 0.5).long(), (1, 4, 4), 2, name="t")
    g = torch.Generator().manual_seed(0)
    x, others = torch.rand(10, 1, 4, 4, generator=g), torch.rand(30, 1, 4, 4, generator=g)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    kt = KnowledgeTransfer(
        teacher,
        laplace(20, per="record"),
        ledger=ledger,
        release_generator=torch.Generator().manual_seed(1),
        plan=PlanSettings(num_queries=40),
        training=TrainingSettings(epochs=1, confusion=True),
    )
    plans = kt.query_plans(x, public=others)
    wanted = defaults.confusion_queries(2, 30, "sup")
    assert wanted == 200 and plans[-2].total == wanted and plans[-2].kind == "sup"  # priced in the dry run
    _Counting.classified = 0
    result = kt.run(x, public=others)
    assert result.counts["confusion_queries"] == wanted
    assert _Counting.classified == sum(p.total for p in plans)  # every planned query, the confusion's included
    assert result.confusion is not None and result.confusion["queries"] == wanted
    assert (
        result.summary()["confusion"] == result.confusion
        and sum(result.confusion["images"]) == 30
        and np.allclose(np.sum(result.confusion["matrix"], 1), 1, atol=1e-3)
    )
    assert result.guarantee.epsilon_record == pytest.approx(20.0)
    charged = ledger.epsilon_per_record()  # the 10 private images once each; the 30 public ones never
    assert len(charged) == 10 and charged == pytest.approx([20.0] * 10)
    with pytest.raises(ValueError, match="measured on public images"):
        KnowledgeTransfer(
            teacher,
            laplace(20, per="record"),
            plan=PlanSettings(num_queries=40),
            training=TrainingSettings(epochs=1, confusion=True),
        ).run(x)
