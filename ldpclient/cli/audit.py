"""``ldpclient audit``: measure what an honest-but-curious teacher could learn from the queries it saw.

The options are one :class:`AuditGroup`; the work is :func:`ldpclient.run.audit.run_audit_command`. Bad input
ends in one line and exit code 2, as every command's does (:mod:`ldpclient.cli.errors`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional, TypeVar

import typer

from ..names import AUGMENTATIONS, BASES, EPSILON_UNITS, choice_list
from ..privacy import defaults as privacy_defaults
from ..privacy.mechanisms import mechanism_names
from ..run.ui import UI
from .errors import user_errors
from .groups import OptionGroup, options_from

T = TypeVar("T")


@dataclass(frozen=True)
class AuditGroup(OptionGroup):
    """The options of ``ldpclient audit``: what the teacher saw and how the client made it, the attacks, the
    output. The client's settings default to the ``--run`` report's, else ``label``'s defaults."""

    APART: ClassVar[frozenset[str]] = frozenset(
        {"epsilon_unit", "reduce", "augment", "old_per", "old_reduction", "old_kind"}
    )

    private: Path = typer.Option(..., "--private", help="Folder of the private images (the records the queries "
                                                        "came from).")
    queries: Optional[Path] = typer.Option(None, "--queries", help="Query log (JSONL) written by the teacher / "
                                                                   "mock server.")
    run: Optional[Path] = typer.Option(None, "--run", help="Report of the 'ldpclient label' run that sent the "
                                                           "queries: settings and query plan are read from it.")
    plan: Optional[Path] = typer.Option(None, "--plan", help="JSON of the client's query plan (maps logged request "
                                                             "ids to records; default: from --run).")
    sources: Optional[Path] = typer.Option(None, "--sources", help=".npy/.json (Q, k) record indices of each "
                                                                   "logged query (instead of --plan).")
    mechanism: Optional[str] = typer.Option(None, "--mechanism", help="Client mechanism: "
                                                                      f"{choice_list(mechanism_names())} (default: "
                                                                      "from --run, else label's default, "
                                                                      f"{privacy_defaults.mechanism()}).")
    epsilon: Optional[float] = typer.Option(None, "--epsilon", help="The client's epsilon (unit: --epsilon-unit); "
                                                                    "needed with --queries unless --run gives it.")
    epsilon_unit: Optional[str] = typer.Option(None, "--epsilon-unit", help="Unit of --epsilon and --sweep: "
                                                                            f"{choice_list(EPSILON_UNITS)} "
                                                                            "(default: from --run, else label's "
                                                                            "default, "
                                                                            f"{privacy_defaults.epsilon_unit()}).")
    delta: Optional[float] = typer.Option(None, "--delta", help="Delta for gaussian mechanisms.")
    reduce: Optional[int] = typer.Option(None, "--reduce", help="Average-pooling factor before noise used by the "
                                                                "client (default: from --run, else label's default "
                                                                "for the record shape).")
    basis: Optional[str] = typer.Option(None, "--basis", help=f"Release basis the client used: {'|'.join(BASES)} "
                                                              "(default: from --run, else label's default for the "
                                                              "mechanism and options).")
    public: Optional[Path] = typer.Option(None, "--public", help="--basis pca: the public images the client's basis "
                                                                 "was fitted on (label's --public).")
    coefficients: Optional[int] = typer.Option(None, "--coefficients", help="--basis dct or pca: coefficients kept per "
                                                                            "record (default: from --run, else the "
                                                                            "record shape's).")
    clip_norm: Optional[float] = typer.Option(None, "--clip-norm", help="--basis dct or pca: the coefficient vector's "
                                                                        "norm bound (default: from --run, else the "
                                                                        "record shape's).")
    postprocess: Optional[str] = typer.Option(
        None,
        "--postprocess",
        help="Client post-processing, e.g. "
        "'clip,blur:1' (default: from --run, "
        "else label's default for the shape, "
        "reduction and --epsilon; with --sweep "
        "and no --epsilon, a pooled or pixel release gets the blur at every epsilon).",
    )
    augment: Optional[str] = typer.Option(None, "--augment", help="The client's --augment: "
                                                                  f"{'|'.join(AUGMENTATIONS)} (none = SIDP; "
                                                                  "default: from the plan).")
    teacher: Optional[str] = typer.Option(None, "--teacher", help="LOCAL teacher to judge reconstructions: "
                                                                  "mock-server checkpoint file or 'digits'.")
    sweep: Optional[str] = typer.Option(None, "--sweep", help="Also simulate the client at these epsilons, e.g. "
                                                              "'0.5,1,2,4'.")
    paper_epsilon: Optional[float] = typer.Option(None, "--paper-epsilon", help="Per-element epsilon a paper "
                                                                                "claims as pure LDP (tested).")
    student: Optional[Path] = typer.Option(None, "--student", help="Student checkpoint for membership inference "
                                                                   "(needs --holdout).")
    holdout: Optional[Path] = typer.Option(None, "--holdout", help="Folder of non-member images of the same "
                                                                   "distribution.")
    size: int = typer.Option(28, "--size", help="Record height = width when no query log gives the shape.")
    channels: int = typer.Option(1, "--channels", help="Record channels when no query log gives the shape.")
    out: Path = typer.Option(Path("audit"), "--out", help="Output folder for audit.json and the PNG figures.")
    cnn_steps: int = typer.Option(150, "--cnn-steps", help="Training steps of the attacker's denoising CNN (0 = "
                                                           "filters only).")
    max_queries: int = typer.Option(2000, "--max-queries", help="Attack at most this many queries per setting.")
    empirical: bool = typer.Option(True, "--empirical/--no-empirical", help="Run the empirical-epsilon test.")
    rme: bool = typer.Option(True, "--rme/--no-rme", help="Run the Reverse Manifold Embedding audit.")
    seed: int = typer.Option(0, "--seed", help="Seed of the attacks and simulations.")
    as_json: bool = typer.Option(False, "--json", help="Print the whole report as JSON.")
    old_per: Optional[str] = typer.Option(None, "--per", hidden=True, help="Old name of --epsilon-unit.")
    old_reduction: Optional[int] = typer.Option(None, "--reduction", hidden=True, help="Old name of --reduce.")
    old_kind: Optional[str] = typer.Option(None, "--kind", hidden=True, help="Old name of --augment.")


def audit(*, given: AuditGroup) -> None:
    """Attack the queries a teacher saw (reconstruction, linkage, empirical epsilon, membership, RME)."""
    from ..run.audit import AuditOptions, run_audit_command, summary_lines

    ui = UI(quiet=given.as_json, json_mode=given.as_json)
    with user_errors(ui):
        options = options_from(
            AuditOptions, given, epsilon_unit=_one_of("--epsilon-unit", given.epsilon_unit, "--per", given.old_per),
            reduce=_one_of("--reduce", given.reduce, "--reduction", given.old_reduction),
            augment=_one_of("--augment", given.augment, "--kind", given.old_kind))
        report = run_audit_command(options)
    if given.as_json:
        ui.print_json(report)
        return
    for line in summary_lines(report):
        typer.echo(line)


def _one_of(name: str, value: T | None, old_name: str, old_value: T | None) -> T | None:
    """An option given under its name or its old (hidden) spelling; both with different values is an error."""
    if old_value is None:
        return value
    if value is not None and value != old_value:
        raise ValueError(f"{name} {value} and its old spelling {old_name} {old_value} disagree; give {name} only")
    return old_value


__all__ = ["AuditGroup", "audit"]
