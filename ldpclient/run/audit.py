"""``ldpclient audit``: measure what an honest-but-curious teacher could learn.

The CLI registers :func:`audit` as a command; ``python -m ldpclient.run.audit``
runs it standalone. ``--run labels.report.json`` reads the client's settings
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
from typing import TYPE_CHECKING, Any, Callable, Optional

import typer

from ..names import AUGMENTATIONS, BASES, EPSILON_UNITS, choice_list
from ..privacy.mechanisms import mechanism_names
from ..report.run_report import RunReport
from ..transfer import defaults

if TYPE_CHECKING:  # torch/numpy are imported where used, so `ldpclient --help` stays fast
    import torch


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def _parse_floats(spec: str | None, what: str) -> list[float]:
    if not spec:
        return []
    try:
        vals = [float(v) for v in spec.split(",") if v.strip()]
    except ValueError:
        _fail(f"{what} must be a comma-separated list of numbers, got {spec!r}")
    if any(not v > 0 for v in vals):
        _fail(f"{what} values must be > 0, got {spec!r}")
    return vals


def _mechanism_factory(st: "_ClientSettings", reduction: int, shape: tuple[int, ...]) -> Callable[[float], Any]:
    """``make(epsilon)``: the run's mechanism (settings ``st``, pooled by ``reduction``) at another epsilon, built
    as ``label`` builds it."""
    from .mechanism import mechanism_for

    def make(eps: float) -> Any:
        return mechanism_for(st.mechanism, epsilon=eps, per=st.per, delta=st.delta, reduce=reduction,
                             value_range=st.value_range or (0.0, 1.0), record_shape=shape,
                             basis=st.basis, coefficients=st.coefficients, clip_norm=st.clip_norm,
                             allow_weak_privacy=True)  # the audit simulates locally: it must reach weak settings

    return make


#: Older spellings of a query kind (``--kind``): ``sidp`` is ``none``.
_KIND_ALIASES = {"sidp": "none"}


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


def _pick(given: Any, recorded: Any, default: Any) -> Any:
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
class _AuditOptions:
    """The options of ``ldpclient audit`` as given (None: not given; see :func:`audit` for each)."""

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
    kind: Optional[str]
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
    kind: Optional[str]
    basis: str = "pool"
    coefficients: Optional[int] = None
    clip_norm: Optional[float] = None
    plan: Optional[dict[str, Any]] = None
    value_range: Optional[tuple[float, float]] = None
    input_shape: Optional[tuple[int, int, int]] = None


@dataclass(frozen=True)
class _Records:
    """The private records ``(N, C, H, W)`` in the mechanism's domain units, with the client's mechanism(s)."""

    values: torch.Tensor
    shape: tuple[int, int, int]
    make: Callable[[float], Any]
    mech: Any
    domain: Any
    postprocess: str


def _client_settings(o: _AuditOptions) -> _ClientSettings:
    """Check that there is something to audit and resolve the client's settings (option > ``--run`` > default)."""
    if o.queries is None and not o.sweep:
        raise ValueError("nothing to audit: give --queries LOG (what the teacher saw) and/or --sweep EPSILONS")
    run = _read_run(o.run) if o.run is not None else None
    m = run.mechanism if run is not None else None
    mechanism = _pick(o.mechanism, m.name if m else None, defaults.mechanism())
    epsilon = _pick(o.epsilon, m.epsilon if m else None, None)
    per = _pick(o.epsilon_unit, m.epsilon_unit if m else None, defaults.epsilon_unit())
    delta = _pick(o.delta, m.delta if m else None, None)
    given_reduce = _pick(o.reduce, m.reduce if m else None, None)
    postprocess = _pick(o.postprocess, run.postprocess if run else None, None)
    from .plan import basis_asked

    config = m.config if m else {}
    basis = basis_asked(o.basis, o.coefficients, o.clip_norm) or (
        config.get("basis", "pool") if run is not None  # what the run used: a report without one pooled
        else defaults.basis(mechanism, per, given_reduce, epsilon if epsilon is not None else 1.0)
    )
    coefficients = _pick(o.coefficients, config.get("coefficients"), None)
    clip_norm = _pick(o.clip_norm, config.get("clip_norm"), None)
    if basis not in BASES:
        raise ValueError(f"--basis must be {choice_list(BASES)}, got {basis!r}")
    if mechanism not in mechanism_names():
        raise ValueError(f"--mechanism must be one of {', '.join(mechanism_names())}, got {mechanism!r}")
    if per not in EPSILON_UNITS:
        raise ValueError(f"--epsilon-unit must be {choice_list(EPSILON_UNITS)}, got {per!r}")
    kind = o.kind
    if kind is not None:
        kind = _KIND_ALIASES.get(kind, kind)
        if kind not in AUGMENTATIONS:
            raise ValueError(f"--kind must be {choice_list(AUGMENTATIONS)}, got {kind!r}")
    if (o.student is None) != (o.holdout is None):
        raise ValueError("membership inference needs both --student and --holdout")
    basis_settings = {"basis": basis, "coefficients": coefficients, "clip_norm": clip_norm}
    if run is None:
        return _ClientSettings(mechanism, epsilon, per, delta, given_reduce, postprocess, kind, **basis_settings)
    t = run.teacher
    return _ClientSettings(
        mechanism, epsilon, per, delta, given_reduce, postprocess, kind, **basis_settings, plan=run.plan,
        value_range=(float(t.value_range[0]), float(t.value_range[1])) if t.value_range else None,
        input_shape=(int(t.input_shape[0]), int(t.input_shape[1]), int(t.input_shape[2])),
    )


def _record_shape(o: _AuditOptions, st: _ClientSettings) -> tuple[int, int, int]:
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


def _load_records(o: _AuditOptions, st: _ClientSettings, shape: tuple[int, int, int]) -> _Records:
    """The private records in the mechanism's domain units, the client's mechanism(s) and post-processing spec."""
    # what `label` would have used, where neither the options nor the run report say
    reduction, postprocess = defaults.shape_settings(
        shape, st.reduce, st.postprocess, st.basis, st.epsilon, st.per
    )
    make = _mechanism_factory(st, reduction, shape)
    from ..io.folders import load_private_folder

    records = load_private_folder(o.private, shape).records
    mech = make(st.epsilon) if st.epsilon is not None else None
    dom = (mech or make(_parse_floats(o.sweep, "--sweep")[0])).domain
    records = dom.low + (dom.high - dom.low) * records  # images are [0, 1]; the mechanism's domain may differ
    return _Records(records, shape, make, mech, dom, postprocess)


def _judge(o: _AuditOptions, r: _Records) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """The local ``--teacher`` on records in domain units (labels ``(N,)``), or None without one."""
    if o.teacher is None:
        return None
    t = _load_teacher(o.teacher, r.shape)
    dom = r.domain
    return lambda x: t((x - dom.low) / (dom.high - dom.low))


def _membership(
    o: _AuditOptions, r: _Records, judge: Optional[Callable[[torch.Tensor], torch.Tensor]]
) -> Optional[dict[str, Any]]:
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
    o: _AuditOptions,
    st: _ClientSettings,
    r: _Records,
    judge: Optional[Callable[[torch.Tensor], torch.Tensor]],
    membership: Optional[dict[str, Any]],
) -> dict:
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
        kind=st.kind,
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
        progress=(lambda m: typer.echo(m, err=True)) if not o.as_json else None,
    )


def _run_audit_command(o: _AuditOptions) -> None:
    """The body of ``ldpclient audit``: audit, then print the report (JSON or summary); exit code 2 on bad input."""
    try:
        st = _client_settings(o)
        records = _load_records(o, st, _record_shape(o, st))
        judge = _judge(o, records)
        membership = _membership(o, records, judge)
        report = _audit_report(o, st, records, judge, membership)
    except (ValueError, OSError) as exc:
        _fail(str(exc))
        return
    if o.as_json:
        from ..io.output import to_json

        typer.echo(to_json(report))
        return
    _print_summary(report)


def audit(
    private: Path = typer.Option(..., "--private", help="Folder of the private images (the records the queries came from)."),
    queries: Optional[Path] = typer.Option(None, "--queries", help="Query log (JSONL) written by the teacher / mock server."),
    run: Optional[Path] = typer.Option(None, "--run", help="Report of the 'ldpclient label' run that sent the queries: settings and query plan are read from it."),
    plan: Optional[Path] = typer.Option(None, "--plan", help="JSON of the client's query plan (maps logged request ids to records; default: from --run)."),
    sources: Optional[Path] = typer.Option(None, "--sources", help=".npy/.json (Q, k) record indices of each logged query (instead of --plan)."),
    mechanism: Optional[str] = typer.Option(None, "--mechanism", help=f"Client mechanism: {choice_list(mechanism_names())} (default: from --run, else label's default, {defaults.mechanism()})."),
    epsilon: Optional[float] = typer.Option(None, "--epsilon", help="The client's epsilon (unit: --epsilon-unit); needed with --queries unless --run gives it."),
    epsilon_unit: Optional[str] = typer.Option(None, "--epsilon-unit", help=f"Unit of --epsilon and --sweep: {choice_list(EPSILON_UNITS)} (default: from --run, else label's default, {defaults.epsilon_unit()})."),
    delta: Optional[float] = typer.Option(None, "--delta", help="Delta for gaussian mechanisms."),
    reduce: Optional[int] = typer.Option(None, "--reduce", help="Average-pooling factor before noise used by the client (default: from --run, else label's default for the record shape)."),
    basis: Optional[str] = typer.Option(None, "--basis", help=f"Release basis the client used: {'|'.join(BASES)} (default: from --run, else label's default for the mechanism and options)."),
    coefficients: Optional[int] = typer.Option(None, "--coefficients", help="--basis dct: coefficients kept per record (default: from --run, else the record shape's)."),
    clip_norm: Optional[float] = typer.Option(None, "--clip-norm", help="--basis dct: the coefficient vector's norm bound (default: from --run, else the record shape's)."),
    postprocess: Optional[str] = typer.Option(None, "--postprocess", help="Client post-processing, e.g. 'clip,blur:1' (default: from --run, else label's default for the shape, reduction and --epsilon; with --sweep and no --epsilon, a pooled or pixel release gets the blur at every epsilon)."),
    kind: Optional[str] = typer.Option(None, "--kind", help=f"Query kind {'|'.join(AUGMENTATIONS)} (none = SIDP; default: from the plan)."),
    teacher: Optional[str] = typer.Option(None, "--teacher", help="LOCAL teacher to judge reconstructions: mock-server checkpoint file or 'digits'."),
    sweep: Optional[str] = typer.Option(None, "--sweep", help="Also simulate the client at these epsilons, e.g. '0.5,1,2,4'."),
    paper_epsilon: Optional[float] = typer.Option(None, "--paper-epsilon", help="Per-element epsilon a paper claims as pure LDP (tested)."),
    student: Optional[Path] = typer.Option(None, "--student", help="Student checkpoint for membership inference (needs --holdout)."),
    holdout: Optional[Path] = typer.Option(None, "--holdout", help="Folder of non-member images of the same distribution."),
    size: int = typer.Option(28, "--size", help="Record height = width when no query log gives the shape."),
    channels: int = typer.Option(1, "--channels", help="Record channels when no query log gives the shape."),
    out: Path = typer.Option(Path("audit"), "--out", help="Output folder for audit.json and the PNG figures."),
    cnn_steps: int = typer.Option(150, "--cnn-steps", help="Training steps of the attacker's denoising CNN (0 = filters only)."),
    max_queries: int = typer.Option(2000, "--max-queries", help="Attack at most this many queries per setting."),
    empirical: bool = typer.Option(True, "--empirical/--no-empirical", help="Run the empirical-epsilon test."),
    rme: bool = typer.Option(True, "--rme/--no-rme", help="Run the Reverse Manifold Embedding audit."),
    seed: int = typer.Option(0, "--seed", help="Seed of the attacks and simulations."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole report as JSON."),
    old_per: Optional[str] = typer.Option(None, "--per", hidden=True, help="Old name of --epsilon-unit."),
    old_reduction: Optional[int] = typer.Option(None, "--reduction", hidden=True, help="Old name of --reduce."),
) -> None:
    """Attack the queries a teacher saw (reconstruction, linkage, empirical epsilon, membership, RME)."""
    epsilon_unit = _one_of("--epsilon-unit", epsilon_unit, "--per", old_per)
    reduce = _one_of("--reduce", reduce, "--reduction", old_reduction)
    _run_audit_command(_AuditOptions(
        private=private, queries=queries, run=run, plan=plan, sources=sources, mechanism=mechanism, epsilon=epsilon,
        epsilon_unit=epsilon_unit, delta=delta, reduce=reduce, basis=basis, coefficients=coefficients,
        clip_norm=clip_norm, postprocess=postprocess, kind=kind, teacher=teacher,
        sweep=sweep, paper_epsilon=paper_epsilon, student=student, holdout=holdout, size=size, channels=channels,
        out=out, cnn_steps=cnn_steps, max_queries=max_queries, empirical=empirical, rme=rme, seed=seed,
        as_json=as_json,
    ))


def _one_of(name: str, value: Any, old_name: str, old_value: Any) -> Any:
    """An option given under its name or its old (hidden) spelling; both with different values is an error."""
    if old_value is None:
        return value
    if value is not None and value != old_value:
        _fail(f"{name} {value} and its old spelling {old_name} {old_value} disagree; give {name} only")
    return old_value


def _print_summary(report: dict) -> None:
    typer.echo(f"privacy audit of {report['num_records']} records {tuple(report['record_shape'])}")
    for r in report.get("summary", []):
        eps_r = r.get("epsilon_record")
        line = (
            f"  eps/elem {r['epsilon_element']:g} (per record {eps_r:.4g}) {r['kind']:>4}: "
            f"linkage {r['linkage_top1']:.3f} (chance {r['linkage_chance']:.4f}, no noise {r['linkage_no_noise']:.3f}); "
            f"reconstruction SSIM {r['recon_ssim']:.3f} (chance {r['recon_chance_ssim']:.3f}), PSNR {r['recon_psnr_db']:.1f} dB"
        )
        if "recon_teacher_agreement" in r:
            line += f"; teacher agrees {r['recon_teacher_agreement']:.3f} (chance {r['recon_teacher_chance']:.3f})"
        typer.echo(line)
    for name, e in report.get("empirical_epsilon", {}).items():
        typer.echo(
            f"  empirical epsilon [{name}]: lower bound {e['epsilon_lb']:.3f} vs reported {e['claimed_epsilon']:.4g}"
            f" (delta {e['claimed_delta']:.3g}); ignoring delta {e['epsilon_lb_pure']:.3f}"
        )
    for flag in report.get("flags", []):
        typer.echo(f"  FLAG: {flag}")
    if "membership" in report:
        s = report["membership"]["student"]
        typer.echo(f"  membership inference: AUC {s['auc']:.3f}, TPR@1%FPR {s['tpr_at_0.01_fpr']:.3f} (chance 0.5 / 0.01)")
    if "rme" in report:
        r = report["rme"]
        typer.echo(
            f"  RME: linkage plain {r['plain_l1']:.3f}, invertible RME after exact inversion "
            f"{r['invertible']['attacker_inverts_l1']:.3f}, folding RME {max(r['folding'].values()):.3f} (chance {r['chance']:.4f})"
        )
    for k, v in report.get("files", {}).items():
        typer.echo(f"  {k}: {v}")


def main(argv: list[str] | None = None) -> None:
    """Standalone entry point: ``python -m ldpclient.run.audit --private DIR ...``."""
    app = typer.Typer(add_completion=False)
    app.command()(audit)
    app(args=argv if argv is not None else sys.argv[1:], prog_name="ldpclient audit")


if __name__ == "__main__":
    main()
