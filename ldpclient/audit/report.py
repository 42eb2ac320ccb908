"""``run_audit``: every attack on one private set, written as a JSON report and PNG figures.

Two ways to get the queries a curious teacher saw:

* **from its log** (``queries=`` a mock-server query log, or a tensor): which
  private record each query came from is read from the client's query plan
  (``plan=``, whose batch ids are the logged request ids) or given as ``sources=``;
* **by simulation** (``sweep=`` {epsilon: mechanism}): the client's own query path
  (mechanism release, post-processing, LDPKiT plan) is run on the private records
  for each setting and each augment, so that attack success can be read
  against epsilon. Nothing leaves the machine.

The attacker's denoisers never see the private records (synthetic training data).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F

from ..io.document import JSONDict, number_or_none
from ..names import AUGMENTATIONS, PLAN_KINDS
from ..transfer.augment import QueryPlan
from .denoise import DenoiserBank, build_denoisers
from .empirical_epsilon import audit_mechanism
from .linkage import linkage_attack
from .membership import MembershipInputs, membership_inference
from .noise_model import NoiseModel
from .reconstruction import reconstruction_attack
from .rme import rme_linkage_audit

if TYPE_CHECKING:
    from ..privacy.base import Mechanism
    from ..privacy.guarantee import Guarantee
    from ..transfer.postprocess import Transform

Classifier = Callable[[torch.Tensor], torch.Tensor]
#: A query plan as ``load_plan`` takes it: itself, a dict of its fields, or a JSON file holding one.
PlanSpec = Union[QueryPlan, Mapping[str, object], str, "os.PathLike[str]"]
#: A QueryPlan's kind -> the augment that builds it
AUGMENT_OF_PLAN = {v: k for k, v in PLAN_KINDS.items()}


def _chw(shape: Sequence[int]) -> tuple[int, int, int]:
    """A record shape as ``(C, H, W)``; the attacks work on images."""
    if len(shape) != 3:
        raise ValueError(f"records must be images (C, H, W), got shape {tuple(shape)}")
    c, h, w = (int(v) for v in shape)
    return c, h, w


# ---- inputs ----------------------------------------------------------------
def load_query_log(
    path: str | os.PathLike[str], value_range: tuple[float, float] = (0.0, 1.0), model: str | None = None
) -> tuple[torch.Tensor, list[tuple[str | None, int]]]:
    """All queries of a mock-server query log as float ``(Q, C, H, W)`` in ``value_range`` units.

    UINT8 requests are mapped back from bytes (``0..255`` -> ``value_range``).
    Also returns ``(request_id, rows)`` per logged request, in log order.
    ``model``: keep only requests to this model name.
    """
    from ..io.querylog import read_query_log

    lo, hi = value_range
    chunks: list[torch.Tensor] = []
    segments: list[tuple[str | None, int]] = []
    for rec, arr in read_query_log(path):
        if model is not None and rec.get("model") != model:
            continue
        t = torch.from_numpy(np.array(arr, copy=True))
        t = lo + (hi - lo) * t.float() / 255.0 if rec.get("datatype") == "UINT8" else t.float()
        if t.dim() != 4:
            raise ValueError(f"{path}: logged tensor of shape {tuple(t.shape)} is not (N, C, H, W)")
        chunks.append(t)
        segments.append((rec.get("request_id"), int(t.shape[0])))
    if not chunks:
        raise ValueError(f"query log {path} holds no queries" + (f" for model {model!r}" if model else ""))
    shapes = {tuple(c.shape[1:]) for c in chunks}
    if len(shapes) > 1:
        raise ValueError(f"query log {path} mixes input shapes {sorted(shapes)}; pass model=")
    return torch.cat(chunks), segments


def load_plan(spec: PlanSpec) -> QueryPlan:
    """A :class:`QueryPlan` from itself, a dict of its fields, or a JSON file holding one
    (at the top level or under ``"plan"``)."""
    if isinstance(spec, QueryPlan):
        return spec
    obj: object = spec
    if not isinstance(spec, Mapping):
        try:
            obj = json.loads(Path(spec).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read query plan {spec}: {exc}") from None
    if isinstance(obj, Mapping) and "kind" not in obj and isinstance(obj.get("plan"), Mapping):
        obj = obj["plan"]
    fields = set(QueryPlan.__dataclass_fields__)
    if not isinstance(obj, Mapping) or not {"kind", "n"} <= set(obj):
        raise ValueError("a query plan needs at least the fields 'kind' and 'n'")
    try:
        return QueryPlan(**{k: v for k, v in obj.items() if k in fields})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad query plan: {exc}") from None


def sources_from_plan(plan: QueryPlan, segments: Sequence[tuple[str | None, int]]) -> torch.Tensor:
    """Source records ``(Q, 2)`` of logged queries from their request ids (the plan's batch ids).

    A request id is ``"<fingerprint>:<batch>"`` or, when the client split a batch
    over several requests, ``"<fingerprint>:<batch>/<k>"``. Rows of requests from
    other plans (other fingerprint or no id) get ``-1`` (unknown source).
    """
    parsed: list[tuple[int, int] | None] = []
    chunk_sizes: dict[tuple[int, int], int] = {}
    for rid, rows in segments:
        p = None
        if isinstance(rid, str) and rid.startswith(plan.fingerprint + ":"):
            tail = rid[len(plan.fingerprint) + 1 :]
            b_str, _, k_str = tail.partition("/")
            try:
                p = (int(b_str), int(k_str) if k_str else 0)
            except ValueError:
                p = None
            if p is not None and not 0 <= p[0] < plan.num_batches:
                p = None
        parsed.append(p)
        if p is not None:
            chunk_sizes.setdefault(p, rows)
    out = []
    for (_rid, rows), p in zip(segments, parsed, strict=True):
        src = torch.full((rows, 2), -1, dtype=torch.long)
        if p is not None:
            b, k = p
            offset = sum(v for (bb, kk), v in chunk_sizes.items() if bb == b and kk < k)
            ids = plan.batch_ids(b)[offset : offset + rows]
            if len(ids) == rows:
                r = plan.recipes(ids)
                keep = torch.from_numpy(~r["blank"])
                src[:, 0] = torch.where(keep, torch.from_numpy(r["i"]), -1)
                src[:, 1] = torch.where(keep, torch.from_numpy(r["j"]), -1)
        out.append(src)
    return torch.cat(out)


def simulate_client(
    private: torch.Tensor,
    mechanism: Mechanism,
    augment: str,
    *,
    queries_per_record: float = 2.0,
    transforms: Sequence[Transform] = (),
    upsample_mode: str = "bilinear",
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The client's queries of ``augment`` for ``private`` (release, post-process, LDPKiT plan).

    Runs locally on the private records (nothing is sent; no ledger involved).
    Returns ``(queries (Q, C, H, W), sources (Q, 2))``; Q = n for SIDP, else
    ``queries_per_record * n`` (capped at the number of Sup pairs).
    """
    from ..transfer.postprocess import apply_all

    if augment not in AUGMENTATIONS:
        raise ValueError(f"augment must be one of {AUGMENTATIONS}, got {augment!r}")
    n = private.shape[0]
    g = torch.Generator().manual_seed(seed)
    rel = mechanism.release(private, generator=g)
    src = rel.upsampled(upsample_mode) if rel.released_shape != rel.record_shape else rel
    src = apply_all(src, list(transforms))
    q = None if augment == "none" else max(1, int(round(queries_per_record * n)))
    if augment == "sup":
        q = min(q or 1, n * (n - 1) // 2)
    plan = QueryPlan(PLAN_KINDS[augment], n, num_queries=q, seed=seed, batch_size=max(1, min(4096, q or n)))
    qs, ss = [], []
    for _, d in plan.batches(src, mechanism=mechanism, noise_mode=upsample_mode):
        qs.append(d.values)
        ss.append(d.sources)
    return torch.cat(qs).float(), torch.cat(ss)


# ---- one query set ----------------------------------------------------------
def audit_queries(
    queries: torch.Tensor,
    sources: torch.Tensor,
    private: torch.Tensor,
    noise_model: NoiseModel,
    augment: str,
    *,
    teacher: Optional[Classifier] = None,
    distractors: Optional[torch.Tensor] = None,
    low: float = 0.0,
    high: float = 1.0,
    cnn_steps: int = 200,
    max_queries: int = 2000,
    seed: int = 0,
    banks: dict[str, DenoiserBank] | None = None,
) -> dict:
    """Reconstruction and linkage on one set of queries of one ``augment``.

    ``max_queries``: a seeded random subset of the queries is attacked (time bound).
    ``distractors``: extra non-private candidates added to the linkage candidate set.
    ``banks``: a cache {augment: DenoiserBank} for this noise model, filled as needed
    (reuse it across augments at the same setting).
    """
    if augment not in AUGMENTATIONS:
        raise ValueError(f"augment must be one of {AUGMENTATIONS}, got {augment!r}")
    shape = _chw(private.shape[1:])
    if tuple(queries.shape[1:]) != shape:
        raise ValueError(f"queries have shape {tuple(queries.shape[1:])} per row, private records {shape}")
    g = torch.Generator().manual_seed(seed)
    has = (sources >= 0).any(1)
    queries, sources = queries[has], sources[has]
    if queries.shape[0] == 0:
        raise ValueError("no query could be traced to a private record (check the plan / sources)")
    if queries.shape[0] > max_queries:
        pick = torch.randperm(queries.shape[0], generator=g)[:max_queries]
        queries, sources = queries[pick], sources[pick]
    banks = {} if banks is None else banks
    for k in {augment, "none"}:
        if k not in banks:
            banks[k] = build_denoisers(noise_model, k, shape, low=low, high=high, cnn_steps=cnn_steps, seed=seed)
    bank, record_bank = banks[augment], banks["none"]
    rec = reconstruction_attack(
        queries,
        sources,
        private,
        bank,
        record_bank=record_bank,
        teacher=teacher,
        data_range=high - low,
        low=low,
        seed=seed,
    )
    cands = private if distractors is None else torch.cat([private, distractors.to(private.dtype)])
    link = linkage_attack(queries, sources, cands, denoiser=bank.candidates[bank.best])
    return {
        "augment": augment,
        "denoiser_validation_mse": bank.validation_mse,
        "reconstruction": rec,
        "linkage": link,
    }


def _summary_row(eps: float | None, augment: str, res: dict, guarantee: Guarantee | None) -> JSONDict:
    rec, link = res["reconstruction"], res["linkage"]
    pq, li = rec["per_query"], rec["linked"]
    row: JSONDict = {
        "epsilon_element": eps,
        "epsilon_record": None if guarantee is None else guarantee.epsilon_record,
        "augment": augment,
        "linkage_top1": link["top1_rate"],
        "linkage_chance": link["chance_top1"],
        "linkage_no_noise": link["no_noise_top1"],
        "recon_ssim": pq["ssim"],
        "recon_psnr_db": pq["psnr_db"],
        "recon_chance_ssim": pq["chance"]["ssim"],
        "linked_ssim": li.get("ssim"),
        "linked_psnr_db": li.get("psnr_db"),
        "denoiser": pq["denoiser"],
    }
    if "teacher_agreement" in pq:
        row["recon_teacher_agreement"] = pq["teacher_agreement"]
        row["recon_teacher_chance"] = pq["chance"]["teacher_agreement"]
        row["linked_teacher_agreement"] = li.get("teacher_agreement")
    if "pair_rate" in link:
        row["linkage_pair"] = link["pair_rate"]
    return row


# ---- everything ---------------------------------------------------------------
@dataclass(frozen=True)
class _Setup:
    """What every attacked query set shares: the private records, their domain and the attack settings."""

    private: torch.Tensor
    low: float
    high: float
    clip: tuple[float, float] | None
    transforms: Sequence[Transform]
    upsample_mode: str
    teacher: Optional[Classifier]
    distractors: torch.Tensor | None
    cnn_steps: int
    max_queries: int
    seed: int
    say: Callable[[str], None]

    def attack(
        self,
        queries: torch.Tensor,
        sources: torch.Tensor,
        nm: NoiseModel,
        augment: str,
        banks: dict[str, DenoiserBank] | None = None,
    ) -> dict:
        """:func:`audit_queries` on one query set (domain units) with these settings."""
        return audit_queries(
            queries,
            sources,
            self.private,
            nm,
            augment,
            teacher=self.teacher,
            distractors=self.distractors,
            low=self.low,
            high=self.high,
            cnn_steps=self.cnn_steps,
            max_queries=self.max_queries,
            seed=self.seed,
            banks=banks,
        )


def _check_private(private: torch.Tensor) -> None:
    """Reject private records that are not at least 2 finite float images ``(N, C, H, W)``."""
    if not isinstance(private, torch.Tensor) or private.dim() != 4 or not private.is_floating_point():
        raise ValueError("private records must be a float tensor (N, C, H, W)")
    if private.shape[0] < 2:
        raise ValueError("the audit needs at least 2 private records")
    if not torch.isfinite(private).all():
        raise ValueError("private records contain NaN or inf")


def _report_header(private: torch.Tensor, low: float, high: float) -> JSONDict:
    """The report's first keys: the records, their domain (mechanism units) and the attacker model."""
    return {
        "num_records": int(private.shape[0]),
        "record_shape": list(private.shape[1:]),
        "domain": [low, high],
        "attacker": "honest-but-curious teacher: keeps every query, knows the client software and settings, "
        "has no private data; denoisers trained on synthetic strokes only",
    }


def _resolve_clip(
    clip_queries: tuple[float, float] | str | None, low: float, high: float
) -> tuple[float, float] | None:
    """The ``(low, high)`` range queries are clipped to (domain units), or None for no clipping."""
    if clip_queries == "domain":
        return (low, high)
    if isinstance(clip_queries, str):
        raise ValueError(f"clip_queries must be 'domain', None or (low, high), got {clip_queries!r}")
    return clip_queries


def _logged_queries(
    s: _Setup,
    queries: torch.Tensor | str | os.PathLike[str],
    sources: torch.Tensor | None,
    plan: PlanSpec | None,
) -> tuple[torch.Tensor, torch.Tensor, QueryPlan | None]:
    """The logged queries ``(Q, C, H, W)`` (domain units), their source records ``(Q, k)`` and the plan, if any."""
    segments: list[tuple[str | None, int]] | None = None
    if isinstance(queries, torch.Tensor):
        q = queries.float()
    else:
        q, segments = load_query_log(queries, value_range=s.clip or (s.low, s.high))
    the_plan = load_plan(plan) if plan is not None else None
    if sources is None:
        if the_plan is None or segments is None:
            raise ValueError("pass plan= (with a query log) or sources= to trace queries to records")
        if the_plan.n != s.private.shape[0]:
            raise ValueError(f"the plan is for n={the_plan.n} records but {s.private.shape[0]} private records "
                             "were given")
        sources = sources_from_plan(the_plan, segments)
    sources = torch.as_tensor(sources).long()
    if sources.dim() == 1:
        sources = sources[:, None]
    return q, sources, the_plan


def _audit_logged(
    s: _Setup,
    report: JSONDict,
    queries: torch.Tensor | str | os.PathLike[str],
    sources: torch.Tensor | None,
    plan: PlanSpec | None,
    mechanism: Mechanism | None,
    augment: str | None,
) -> dict[str, torch.Tensor] | None:
    """Attack what the teacher logged: fills ``logged`` and ``summary``; returns the example images, if any."""
    s.say("reading queries")
    if mechanism is None:
        raise ValueError("auditing logged queries needs the client's mechanism (the attacker knows it)")
    q, sources, the_plan = _logged_queries(s, queries, sources, plan)
    augment = augment or (AUGMENT_OF_PLAN[the_plan.kind] if the_plan is not None else None)
    if augment is None:
        augment = "sup" if ((sources >= 0).sum(1) == 2).any() else "none"
    nm = NoiseModel.from_mechanism(
        mechanism, transforms=s.transforms, upsample_mode=s.upsample_mode,
        rand_scale=the_plan.rand_scale if the_plan is not None else 1.0, clip=s.clip,
    )
    s.say(f"attacking {q.shape[0]} logged {augment} queries")
    res = s.attack(q, sources, nm, augment)
    examples = res["reconstruction"].pop("examples", None)
    gu = mechanism.guarantee(tuple(s.private.shape[1:]))
    report["logged"] = {"num_logged_queries": int(q.shape[0]), "traced": int((sources >= 0).any(1).sum()),
                        "guarantee": gu.as_dict(), **res}
    report["summary"] = [_summary_row(gu.epsilon_element, augment, res, gu)]
    return examples


def _audit_sweep(
    s: _Setup,
    report: JSONDict,
    sweep: Mapping[float, Mechanism],
    sweep_augments: Sequence[str],
    queries_per_record: float,
    examples: dict[str, torch.Tensor] | None,
) -> dict[str, torch.Tensor] | None:
    """Simulate the client at each per-element epsilon and attack each augment; returns the example images."""
    logged = report.get("summary")
    rows: list[object] = logged if isinstance(logged, list) else []
    attacked: list[JSONDict] = []
    report["summary"], report["sweep"] = rows, attacked
    for eps in sorted(sweep):
        mech = sweep[eps]
        gu = mech.guarantee(tuple(s.private.shape[1:]))
        nm = NoiseModel.from_mechanism(mech, transforms=s.transforms, upsample_mode=s.upsample_mode, clip=s.clip)
        banks: dict[str, DenoiserBank] = {}
        for k in sweep_augments:
            s.say(f"simulating {k} queries at epsilon {eps:g} per element")
            qs, ss = simulate_client(s.private, mech, k, queries_per_record=queries_per_record,
                                     transforms=s.transforms, upsample_mode=s.upsample_mode, seed=s.seed)
            if s.clip is not None:
                qs = qs.clamp(*s.clip)
            res = s.attack(qs, ss, nm, k, banks=banks)
            ex = res["reconstruction"].pop("examples", None)
            if examples is None and ex is not None and k == "none":
                examples = {f"{name} eps={eps:g}" if name != "original" else name: v for name, v in ex.items()}
            attacked.append({"epsilon_element": eps, "guarantee": gu.as_dict(), **res})
            rows.append(_summary_row(eps, k, res, gu))
    return examples


def _audit_empirical(
    s: _Setup,
    report: JSONDict,
    mechanism: Mechanism | None,
    sweep: Mapping[float, Mechanism] | None,
    paper_epsilon: float | None,
    samples: int,
) -> None:
    """Empirical-epsilon test of the client's and every swept mechanism; fills ``empirical_epsilon`` and ``flags``."""
    mechs = {}
    if mechanism is not None:
        mechs["client"] = mechanism
    for eps, m in (sweep or {}).items():
        mechs[f"sweep eps={eps:g}"] = m
    found: dict[str, dict] = {}
    for name, m in mechs.items():
        s.say(f"empirical epsilon of {name}")
        found[name] = audit_mechanism(
            m, tuple(s.private.shape[1:]), paper_epsilon=paper_epsilon, samples=samples, seed=s.seed
        )
    report["empirical_epsilon"] = found
    report["flags"] = [
        f"{name}: empirical lower bound {r['epsilon_lb']:.3g} exceeds the reported per-element epsilon "
        f"{r['claimed_epsilon']:.3g} (delta {r['claimed_delta']:.3g})"
        for name, r in found.items() if r["violated"]
    ] + [
        f"{name}: the pure epsilon {r['paper_epsilon']:.3g} claimed by the paper is refuted "
        f"(lower bound {r['epsilon_lb_pure']:.3g} ignoring delta)"
        for name, r in found.items() if r.get("paper_claim_violated")
    ]


def _audit_rme(
    s: _Setup, report: JSONDict, mechanism: Mechanism | None, sweep: Mapping[float, Mechanism] | None
) -> None:
    """Reverse Manifold Embedding audit on the records as 7x7 feature vectors; fills ``rme``."""
    s.say("Reverse Manifold Embedding audit")
    private = s.private
    feats = F.adaptive_avg_pool2d(private.float(), 7).flatten(1) if private.shape[-1] >= 7 else private.flatten(1)
    scale_b = None
    ref = mechanism if mechanism is not None else (sweep[min(sweep)] if sweep else None)
    if ref is not None:
        params = ref.guarantee(tuple(private.shape[1:])).params  # the record's shape: a reduction needs (H, W)
        scale_b = number_or_none(params, "b") or number_or_none(params, "sigma")
    report["rme"] = rme_linkage_audit(feats, scale_b or 1.0, seed=s.seed)


def run_audit(
    private: torch.Tensor,
    *,
    queries: torch.Tensor | str | os.PathLike[str] | None = None,
    sources: torch.Tensor | None = None,
    plan: PlanSpec | None = None,
    mechanism: Mechanism | None = None,
    augment: str | None = None,
    transforms: Sequence[Transform] = (),
    upsample_mode: str = "bilinear",
    clip_queries: tuple[float, float] | str | None = "domain",
    teacher: Optional[Classifier] = None,
    sweep: Mapping[float, Mechanism] | None = None,
    sweep_augments: Sequence[str] = AUGMENTATIONS,
    queries_per_record: float = 2.0,
    empirical: bool = True,
    empirical_samples: int = 200_000,
    paper_epsilon: float | None = None,
    membership: MembershipInputs | None = None,
    rme: bool = True,
    distractors: torch.Tensor | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    cnn_steps: int = 150,
    max_queries: int = 2000,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> JSONDict:
    """Run the privacy audit; returns the report dict (and writes it under ``out_dir``).

    ``private``: the private records ``(N, C, H, W)`` in the mechanism's domain units
    (``[0, 1]`` for images). ``queries``: what the teacher logged (a query-log path
    or a tensor), with ``plan`` (the client's QueryPlan, to trace request ids to
    records) or ``sources`` ``(Q, k)``. ``mechanism``: the client's mechanism (the
    attacker knows the software and its settings; needed to train the denoiser
    and for the empirical-epsilon test). ``augment``: ``none`` (SIDP)/``rand``/``sup``
    (default: from the plan). ``transforms``: the client's post-processing
    (``ldpclient.transfer.postprocess`` objects). ``teacher``: a local callable images ->
    labels/logits used to judge reconstructions (never a remote API: that would
    send reconstructions of private data out). ``sweep``: {per-element epsilon:
    mechanism} to simulate the client and attack each ``sweep_augments``.
    ``membership``: keyword arguments of :func:`membership_inference` (``model``,
    ``members``, ``member_labels``, ``nonmembers``, ``nonmember_labels``, optional
    ``baseline_model``). ``rme``: also audit Reverse Manifold Embedding on the
    records as 7x7 feature vectors.
    """
    say = progress or (lambda msg: None)
    _check_private(private)
    dom = getattr(mechanism, "domain", None)
    low, high = (dom.low, dom.high) if dom is not None else (0.0, 1.0)
    report = _report_header(private, low, high)
    clip = _resolve_clip(clip_queries, low, high)
    report["queries_clipped_to"] = list(clip) if clip is not None else None
    s = _Setup(
        private, low, high, clip, transforms, upsample_mode, teacher, distractors, cnn_steps, max_queries, seed, say
    )
    examples: dict[str, torch.Tensor] | None = None
    if queries is not None:
        examples = _audit_logged(s, report, queries, sources, plan, mechanism, augment)
    if sweep:
        examples = _audit_sweep(s, report, sweep, sweep_augments, queries_per_record, examples)
    if empirical:
        _audit_empirical(s, report, mechanism, sweep, paper_epsilon, empirical_samples)
    if membership is not None:
        say("membership inference on the student")
        report["membership"] = membership_inference(**membership)
    if rme:
        _audit_rme(s, report, mechanism, sweep)
    if out_dir is not None:
        write_report(report, out_dir, examples)
    return report


def write_report(
    report: dict, out_dir: str | os.PathLike[str], examples: Mapping[str, torch.Tensor] | None = None
) -> dict:
    """Write ``audit.json`` and the PNG figures into ``out_dir``; returns their paths (also stored in the report)."""
    from ..io.charts import image_rows_png, line_chart_png
    from ..io.output import write_json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    if examples:
        files["reconstructions_png"] = str(image_rows_png(examples, out / "audit_reconstructions.png"))
    rows = [r for r in report.get("summary", []) if r.get("epsilon_element")]
    eps = sorted({r["epsilon_element"] for r in rows})
    if len(eps) >= 2:
        series: dict[str, list[float]] = {}
        for augment in AUGMENTATIONS:
            by = {r["epsilon_element"]: r for r in rows if r["augment"] == augment}
            if len(by) == len(eps):
                series[f"link {augment}"] = [by[e]["linkage_top1"] for e in eps]
                if augment == "none":
                    series["SSIM SIDP"] = [by[e]["recon_ssim"] for e in eps]
                    if "recon_teacher_agreement" in by[eps[0]]:
                        series["teacher agr. SIDP"] = [by[e]["recon_teacher_agreement"] for e in eps]
        if series:
            files["vs_epsilon_png"] = str(line_chart_png(eps, series, out / "audit_vs_epsilon.png",
                                                         title="attack success vs per-element epsilon",
                                                         xlabel="epsilon per element (log scale)",
                                                         ylabel="attack success"))
    report["files"] = {**files, "report_json": str(out / "audit.json")}
    write_json(out / "audit.json", report)
    return files


__all__ = [
    "audit_queries",
    "load_plan",
    "load_query_log",
    "run_audit",
    "simulate_client",
    "sources_from_plan",
    "write_report",
]
