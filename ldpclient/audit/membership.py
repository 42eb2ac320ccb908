"""Membership inference on the student: does it betray which records were private?

Loss-threshold attack (Yeom et al. 2018): the attacker scores each candidate
record by the negative cross-entropy loss of the student on it (low loss =
"member"). Members are the private records the student was trained from (through
noised queries); non-members are held-out records of the same distribution.
Figures: ROC AUC and TPR at 1% FPR, with chance (AUC 0.5, TPR = FPR) and, when a
``baseline_model`` is given (e.g. a student trained on the clean records), the
same figures for it (the no-noise baseline).
"""

from __future__ import annotations

from typing import Optional, TypedDict

import torch
import torch.nn as nn
import torch.nn.functional as F

from .stats import roc_auc, tpr_at_fpr


def per_example_loss(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """Cross-entropy of ``model`` on each ``(image, label)``, ``(N,)`` float64 (model put in eval mode)."""
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{images.shape[0]} images but {labels.shape[0]} labels")
    model.eval()
    out = []
    with torch.no_grad():
        for x, y in zip(images.split(chunk), labels.split(chunk), strict=True):
            out.append(F.cross_entropy(model(x.float()), y.long(), reduction="none").double())
    return torch.cat(out)


def _attack(model: nn.Module, members, member_labels, nonmembers, nonmember_labels, fpr: float) -> dict:
    s_in = -per_example_loss(model, members, member_labels)
    s_out = -per_example_loss(model, nonmembers, nonmember_labels)
    return {
        "auc": roc_auc(s_in, s_out),
        f"tpr_at_{fpr:g}_fpr": tpr_at_fpr(s_in, s_out, fpr),
        "mean_loss_members": float(-s_in.mean()),
        "mean_loss_nonmembers": float(-s_out.mean()),
    }


class MembershipInputs(TypedDict, total=False):
    """The keyword arguments of :func:`membership_inference` (``baseline_model`` and ``fpr`` may be left out)."""

    model: nn.Module
    members: torch.Tensor
    member_labels: torch.Tensor
    nonmembers: torch.Tensor
    nonmember_labels: torch.Tensor
    baseline_model: Optional[nn.Module]
    fpr: float


def membership_inference(
    model: nn.Module,
    members: torch.Tensor,
    member_labels: torch.Tensor,
    nonmembers: torch.Tensor,
    nonmember_labels: torch.Tensor,
    *,
    baseline_model: Optional[nn.Module] = None,
    fpr: float = 0.01,
) -> dict:
    """Loss-threshold membership inference against ``model`` (see module doc).

    Images ``(N, C, H, W)`` in the student's input units; labels int64 (true labels,
    or the teacher's labels of the clean records when the truth is unknown).
    """
    if members.shape[0] < 1 or nonmembers.shape[0] < 1:
        raise ValueError("membership inference needs at least one member and one non-member")
    res = {
        "num_members": int(members.shape[0]),
        "num_nonmembers": int(nonmembers.shape[0]),
        "student": _attack(model, members, member_labels, nonmembers, nonmember_labels, fpr),
        "chance": {"auc": 0.5, f"tpr_at_{fpr:g}_fpr": fpr},
    }
    if baseline_model is not None:
        res["no_noise"] = _attack(baseline_model, members, member_labels, nonmembers, nonmember_labels, fpr)
    return res
