"""``ldpclient audit``: measure what an honest-but-curious teacher could learn.

:func:`run_audit_command` is the command's body (:mod:`ldpclient.cli.audit` declares its options).
``--run labels.report.json`` reads the client's settings
(mechanism, epsilon and its unit, delta, reduce, post-processing, value range)
and its full query plan from the report of a finished ``ldpclient label`` run
(a :class:`~ldpclient.report.run_report.RunReport`, read by ``RunReport.read``;
the partial report of a run stopped at a cap is refused), so that the
query log a teacher kept (``ldpclient serve-mock --query-log``) is audited with
exactly the settings that produced it. Options use the names of ``label``
(``--epsilon-unit``, ``--reduce``); the old spellings ``--per`` and
``--reduction`` still work.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, TypeVar

from ..io.document import (
    Document,
    JSONDict,
    as_number,
    as_section,
    integer_or_none,
    items,
    number_or_none,
    rows,
    section,
    section_or_none,
    text,
)
from ..names import AUGMENTATIONS, BASES, EPSILON_UNITS, choice_list
from ..privacy import defaults as privacy_defaults
from ..privacy.mechanisms import mechanism_names
from ..report.run_report import RunReport

if TYPE_CHECKING:  # torch/numpy are imported where used, so `ldpclient --help` stays fast
    import torch

    from ..audit.membership import MembershipInputs
    from ..privacy.base import Mechanism
    from ..privacy.guarantee import Domain
    from ..privacy.pca import PcaBasis


def _parse_floats(spec: str | None, what: str) -> list[float]:
    if not spec:
        return []
    try:
        vals = [float(v) for v in spec.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{what} must be a comma-separated list of numbers, got {spec!r}") from None
    if any(not v > 0 for v in vals):
        raise ValueError(f"{what} values must be > 0, got {spec!r}")
    return vals


def _mechanism_factory(st: "_ClientSettings", reduction: int, shape: tuple[int, ...],
                       pca: PcaBasis | None = None) -> Callable[[float], Mechanism]:
    """``make(epsilon)``: the run's mechanism (settings ``st``, pooled by ``reduction``; releasing in the basis
    ``pca`` with ``--basis pca``) at another epsilon, built as ``label`` builds it."""
    from .mechanism import mechanism_for

    def make(eps: float) -> Mechanism:
        return mechanism_for(st.mechanism, epsilon=eps, per=st.per, delta=st.delta, reduce=reduction,
                             value_range=st.value_range or (0.0, 1.0), record_shape=shape,
                             basis=st.basis, coefficients=st.coefficients, clip_norm=st.clip_norm, pca=pca,
                             allow_weak_privacy=True)  # the audit simulates locally: it must reach weak settings

    return make


#: Other spellings of an augment: ``sidp`` is ``none``.
_AUGMENT_ALIASES = {"sidp": "none"}


def _read_run(path: Path) -> RunReport:
    """The report of the ``ldpclient label`` run given as ``--run`` (read through :meth:`RunReport.read`)."""
    try:
        report = RunReport.read(path)
    except ValueError as exc:
        raise ValueError(f"--run: {exc}") from None
    if report.plan is None:
        raise ValueError(f"--run: {str(path)!r} holds no query plan (written by an older ldpclient)")
    if len(report.teacher.input_shape) != 3:
        raise ValueError(f"--run: {str(path)!r}: teacher input shape {report.teacher.input_shape} is not (C, H, W)")
    return report


T = TypeVar("T")
D = TypeVar("D")


def _pick(given: T | None, recorded: T | None, default: D) -> T | D:
    """An explicit option wins over the run report, which wins over the default."""
    if given is not None:
        return given
    return default if recorded is None else recorded


def _load_teacher(spec: str, input_shape: tuple[int, int, int]) -> Callable[[torch.Tensor], torch.Tensor]:
    """A local teacher: a mock-server checkpoint file, or ``digits`` (the bundled demo teacher)."""
    from mock_server.config import ServerConfig
    from mock_server.teacher import digits_teacher, load_checkpoint

    if spec == "digits":
        tm = digits_teacher(ServerConfig(image_size=input_shape[-1]))
    else:
        if "://" in spec:
            raise ValueError(
                "--teacher must be a local checkpoint (or 'digits'): the audit classifies reconstructions of your "
                "private records and must not send them to a remote teacher"
            )
        tm = load_checkpoint(spec, ServerConfig(image_size=input_shape[-1]))
    import numpy as np
    import torch

    return lambda x: torch.from_numpy(np.asarray(tm.predict(x.float().numpy()))).long()


def _load_sources(path: Path) -> "torch.Tensor":
    import numpy as np
    import torch

    if path.suffix == ".npy":
        return torch.from_numpy(np.load(path, allow_pickle=False)).long()
    try:
        return torch.tensor(json.loads(path.read_text()), dtype=torch.long)
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"cannot read sources {path}: {exc}") from None


@dataclass(frozen=True)
class AuditOptions:
    """The options of ``ldpclient audit`` as given (None: not given; see ``ldpclient audit --help`` for each)."""

    private: Path
    queries: Optional[Path]
    run: Optional[Path]
    plan: Optional[Path]
    sources: Optional[Path]
    mechanism: Optional[str]
    epsilon: Optional[float]
    epsilon_unit: Optional[str]
    delta: Optional[float]
    reduce: Optional[int]
    basis: Optional[str]
    coefficients: Optional[int]
    clip_norm: Optional[float]
    postprocess: Optional[str]
    augment: Optional[str]
    teacher: Optional[str]
    sweep: Optional[str]
    paper_epsilon: Optional[float]
    student: Optional[Path]
    holdout: Optional[Path]
    size: int
    channels: int
    out: Path
    cnn_steps: int
    max_queries: int
    empirical: bool
    rme: bool
    seed: int
    as_json: bool
    public: Optional[Path] = None


@dataclass(frozen=True)
class _ClientSettings:
    """The client's settings: the option if given, else the ``--run`` report, else ``label``'s default.

    ``plan``, ``value_range`` and ``input_shape`` come from the ``--run`` report only (None without one)."""

    mechanism: str
    epsilon: Optional[float]
    per: str
    delta: Optional[float]
    reduce: Optional[int]
    postprocess: Optional[str]
    augment: Optional[str]
    basis: str = "pool"
    coefficients: Optional[int] = None
    clip_norm: Optional[float] = None
    basis_digest: Optional[str] = None
    plan: Optional[JSONDict] = None
    value_range: Optional[tuple[float, float]] = None
    input_shape: Optional[tuple[int, int, int]] = None


@dataclass(frozen=True)
class _Records:
    """The private records ``(N, C, H, W)`` in the mechanism's domain units, with the client's mechanism(s)."""

    values: torch.Tensor
    shape: tuple[int, int, int]
    make: Callable[[float], Mechanism]
    mech: Mechanism | None
    domain: Domain
    postprocess: str


def _client_settings(o: AuditOptions) -> _ClientSettings:
    """Check that there is something to audit and resolve the client's settings (option > ``--run`` > default)."""
    if o.queries is None and not o.sweep:
        raise ValueError("nothing to audit: give --queries LOG (what the teacher saw) and/or --sweep EPSILONS")
    run = _read_run(o.run) if o.run is not None else None
    m = run.mechanism if run is not None else None
    mechanism = _pick(o.mechanism, m.name if m else None, privacy_defaults.mechanism())
    epsilon = _pick(o.epsilon, m.epsilon if m else None, None)
    per = _pick(o.epsilon_unit, m.epsilon_unit if m else None, privacy_defaults.epsilon_unit())
    delta = _pick(o.delta, m.delta if m else None, None)
    given_reduce = _pick(o.reduce, m.reduce if m else None, None)
    postprocess = _pick(o.postprocess, run.postprocess if run else None, None)
    from .plan import basis_asked

    config = m.config if m else {}
    basis = basis_asked(o.basis, o.coefficients, o.clip_norm) or (
        text(config, "basis", "pool") if run is not None  # what the run used: a report without one pooled
        else privacy_defaults.basis(mechanism, per, given_reduce, epsilon if epsilon is not None else 1.0)
    )
    coefficients = _pick(o.coefficients, integer_or_none(config, "coefficients"), None)
    clip_norm = _pick(o.clip_norm, number_or_none(config, "clip_norm"), None)
    if basis not in BASES:
        raise ValueError(f"--basis must be {choice_list(BASES)}, got {basis!r}")
    if mechanism not in mechanism_names():
        raise ValueError(f"--mechanism must be one of {', '.join(mechanism_names())}, got {mechanism!r}")
    if per not in EPSILON_UNITS:
        raise ValueError(f"--epsilon-unit must be {choice_list(EPSILON_UNITS)}, got {per!r}")
    augment = o.augment
    if augment is not None:
        augment = _AUGMENT_ALIASES.get(augment, augment)
        if augment not in AUGMENTATIONS:
            raise ValueError(f"--augment must be {choice_list(AUGMENTATIONS)}, got {augment!r}")
    if (o.student is None) != (o.holdout is None):
        raise ValueError("membership inference needs both --student and --holdout")
    if run is None:
        return _ClientSettings(mechanism, epsilon, per, delta, given_reduce, postprocess, augment, basis=basis,
                               coefficients=coefficients, clip_norm=clip_norm)
    t = run.teacher
    return _ClientSettings(
        mechanism, epsilon, per, delta, given_reduce, postprocess, augment, basis=basis, coefficients=coefficients,
        clip_norm=clip_norm, basis_digest=text(config, "basis_digest") if basis == "pca" else None, plan=run.plan,
        value_range=(float(t.value_range[0]), float(t.value_range[1])) if t.value_range else None,
        input_shape=(int(t.input_shape[0]), int(t.input_shape[1]), int(t.input_shape[2])),
    )


def _record_shape(o: AuditOptions, st: _ClientSettings) -> tuple[int, int, int]:
    """The record shape ``(C, H, W)``: from the query log, else the ``--run`` report, else ``--channels``/``--size``."""
    shape: tuple[int, int, int] = st.input_shape or (o.channels, o.size, o.size)
    if o.queries is not None:
        if not o.queries.is_file():
            raise ValueError(f"query log {o.queries} does not exist")
        if st.epsilon is None:
            raise ValueError("--epsilon (the client's setting) is needed to audit a query log")
        from ..audit.report import load_query_log

        log_q, _ = load_query_log(o.queries)
        shape = tuple(int(v) for v in log_q.shape[1:])  # type: ignore[assignment]
    return shape


def _load_records(o: AuditOptions, st: _ClientSettings, shape: tuple[int, int, int]) -> _Records:
    """The private records in the mechanism's domain units, the client's mechanism(s) and post-processing spec."""
    # what `label` would have used, where neither the options nor the run report say
    from .plan import shape_settings

    reduction, postprocess = shape_settings(
        shape, st.reduce, st.postprocess, st.basis, st.epsilon, st.per
    )
    from ..io.folders import load_private_folder

    make = _mechanism_factory(st, reduction, shape, _public_basis(o, st, shape))

    records = load_private_folder(o.private, shape).records
    mech = make(st.epsilon) if st.epsilon is not None else None
    dom = (mech or make(_parse_floats(o.sweep, "--sweep")[0])).domain
    records = dom.low + (dom.high - dom.low) * records  # images are [0, 1]; the mechanism's domain may differ
    return _Records(records, shape, make, mech, dom, postprocess)


def _public_basis(o: AuditOptions, st: _ClientSettings, shape: tuple[int, int, int]) -> PcaBasis | None:
    """The basis a ``pca`` client released in, fitted on the ``--public`` images (None for other bases); ValueError
    without them, or when they fit another basis than the ``--run`` report's."""
    if st.basis != "pca":
        return None
    if o.public is None:
        raise ValueError("--basis pca: give --public DIR, the public images the client fitted its basis on")
    from ..io.folders import load_private_folder
    from .mechanism import fit_public_basis

    value_range = st.value_range or (0.0, 1.0)
    lo, hi = value_range
    basis = fit_public_basis(lo + (hi - lo) * load_private_folder(o.public, shape).records, value_range,
                             st.coefficients)
    if st.basis_digest is not None and basis.digest != st.basis_digest:
        raise ValueError(f"--public: these images fit basis {basis.digest}, but the run's releases were in basis "
                         f"{st.basis_digest}; give the --public folder the run was given")
    return basis


def _judge(o: AuditOptions, r: _Records) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """The local ``--teacher`` on records in domain units (labels ``(N,)``), or None without one."""
    if o.teacher is None:
        return None
    t = _load_teacher(o.teacher, r.shape)
    dom = r.domain
    return lambda x: t((x - dom.low) / (dom.high - dom.low))


def _membership(
    o: AuditOptions, r: _Records, judge: Optional[Callable[[torch.Tensor], torch.Tensor]]
) -> Optional[MembershipInputs]:
    """Keyword arguments of the membership-inference attack (``--student``, ``--holdout``), or None."""
    if o.student is None or o.holdout is None:
        return None
    if judge is None:
        raise ValueError("membership inference labels records with the teacher: give --teacher too")
    from ..io.folders import load_private_folder
    from ..transfer.student import load_checkpoint

    model, _ = load_checkpoint(o.student)
    dom = r.domain
    non = dom.low + (dom.high - dom.low) * load_private_folder(o.holdout, r.shape).records
    return {"model": model, "members": r.values, "member_labels": judge(r.values),
            "nonmembers": non, "nonmember_labels": judge(non)}


def _audit_report(
    o: AuditOptions,
    st: _ClientSettings,
    r: _Records,
    judge: Optional[Callable[[torch.Tensor], torch.Tensor]],
    membership: Optional[MembershipInputs],
) -> JSONDict:
    """Run :func:`ldpclient.audit.run_audit` with the resolved settings; returns its report."""
    from ..audit import run_audit
    from ..transfer.postprocess import parse_postprocess

    sweep_map = {e: r.make(e) for e in _parse_floats(o.sweep, "--sweep")}
    return run_audit(
        r.values,
        queries=o.queries,
        sources=_load_sources(o.sources) if o.sources is not None else None,
        plan=o.plan if o.plan is not None else st.plan,
        mechanism=r.mech,
        augment=st.augment,
        transforms=parse_postprocess(r.postprocess),
        teacher=judge,
        sweep=sweep_map or None,
        paper_epsilon=o.paper_epsilon,
        membership=membership,
        rme=o.rme,
        empirical=o.empirical,
        out_dir=o.out,
        cnn_steps=o.cnn_steps,
        max_queries=o.max_queries,
        seed=o.seed,
        progress=(lambda m: print(m, file=sys.stderr)) if not o.as_json else None,
    )


def run_audit_command(o: AuditOptions) -> JSONDict:
    """The body of ``ldpclient audit``: resolve the client's settings, load the records, attack; the report.
    ValueError (or OSError) for bad input."""
    st = _client_settings(o)
    records = _load_records(o, st, _record_shape(o, st))
    judge = _judge(o, records)
    membership = _membership(o, records, judge)
    return _audit_report(o, st, records, judge, membership)


def summary_lines(report: Document) -> list[str]:
    """The audit report in words, one finding a line."""
    lines = [f"privacy audit of {report['num_records']} records {tuple(items(report, 'record_shape'))}"]
    for r in rows(report, "summary"):
        eps_r = r.get("epsilon_record")
        line = (
            f"  eps/elem {r['epsilon_element']:g} (per record {eps_r:.4g}) {r['augment']:>4}: "
            f"linkage {r['linkage_top1']:.3f} (chance {r['linkage_chance']:.4f}, no noise "
            f"{r['linkage_no_noise']:.3f}); "
            f"reconstruction SSIM {r['recon_ssim']:.3f} (chance {r['recon_chance_ssim']:.3f}), PSNR "
            f"{r['recon_psnr_db']:.1f} dB"
        )
        if "recon_teacher_agreement" in r:
            line += f"; teacher agrees {r['recon_teacher_agreement']:.3f} (chance {r['recon_teacher_chance']:.3f})"
        lines.append(line)
    for name, found in (section_or_none(report, "empirical_epsilon") or {}).items():
        e = as_section(found, name)
        lines.append(
            f"  empirical epsilon [{name}]: lower bound {e['epsilon_lb']:.3f} vs reported {e['claimed_epsilon']:.4g}"
            f" (delta {e['claimed_delta']:.3g}); ignoring delta {e['epsilon_lb_pure']:.3f}"
        )
    for flag in items(report, "flags"):
        lines.append(f"  FLAG: {flag}")
    if "membership" in report:
        s = section(section(report, "membership"), "student")
        lines.append(f"  membership inference: AUC {s['auc']:.3f}, TPR@1%FPR {s['tpr_at_0.01_fpr']:.3f} (chance "
                     "0.5 / 0.01)")
    if "rme" in report:
        r = section(report, "rme")
        folding = [as_number(v, "folding") for v in section(r, "folding").values()]
        lines.append(
            f"  RME: linkage plain {r['plain_l1']:.3f}, invertible RME after exact inversion "
            f"{section(r, 'invertible')['attacker_inverts_l1']:.3f}, folding RME {max(folding):.3f} (chance "
            f"{r['chance']:.4f})"
        )
    for k, v in (section_or_none(report, "files") or {}).items():
        lines.append(f"  {k}: {v}")
    return lines


__all__ = ["AuditOptions", "run_audit_command", "summary_lines"]
