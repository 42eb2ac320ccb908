"""What a label run writes beside its report: the labels file, its unadapted and baseline siblings, and the
``--html`` page; and the check, before anything is noised or sent, that none of them is an input or state.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..report.label_files import iter_label_rows, label_format_for, write_labels
from ..state import state_dir
from .handoffs import RunOutcome, RunSetup, WrittenOutputs
from .label_report import report_path_for
from .options import LabelOptions
from .output_paths import check_output_paths

if TYPE_CHECKING:
    from ..report.label_page import PageImages
    from ..report.run_report import RunReport
    from .images import Images

__all__ = ["check_label_outputs", "page_images", "sibling", "write_outputs", "write_page"]


def check_label_outputs(opts: LabelOptions, *, given_records: bool) -> None:
    """ValueError before anything is noised or sent when a file the run writes is an input, another output or
    state (:func:`~ldpclient.run.output_paths.check_output_paths`)."""
    outputs: dict[str, Path] = {}
    if opts.output is not None:
        outputs["--output"] = opts.output
        if opts.adapt:
            outputs["--output's unadapted labels"] = sibling(opts.output, ".unadapted")
        if opts.baseline:
            outputs["--baseline's labels"] = sibling(opts.output, ".baseline")
            outputs["--baseline's unadapted labels"] = sibling(opts.output, ".baseline.unadapted")
    if opts.html_path is not None:
        outputs["--html"] = opts.html_path
    report = report_path_for(opts)
    if report is not None:
        outputs["--report"] = report
    folders = {} if given_records else {"PRIVATE_DIR": opts.folder()}
    if opts.public is not None:
        folders["--public"] = opts.public
    check_output_paths(outputs, input_files={"--check": opts.check} if isinstance(opts.check, Path) else {},
                       input_folders=folders, state=opts.state_locations(state_dir(opts.state_dir, create=False)))


def write_outputs(setup: RunSetup, images: Images, outcome: RunOutcome, report_path: Path | None) -> WrittenOutputs:
    """Write the labels, the unadapted and baseline labels beside them (rows streamed); the ``outputs`` section."""
    opts, n, result = setup.opts, len(images), outcome.result
    if opts.output is None:  # the library asked for the result only
        return WrittenOutputs(labelled=n, outputs={})
    fmt = label_format_for(opts.output, opts.format)
    paths = images.printable_paths

    def write(path: Path, labels: torch.Tensor, confidences: torch.Tensor | None) -> None:
        conf = confidences if confidences is not None else _no_conf(n)
        write_labels(path, iter_label_rows(paths, labels, conf, setup.meta.class_names), fmt)

    write(opts.output, result.labels, result.confidences)
    outputs = {"labels": str(opts.output), "format": fmt, "report": str(report_path)}
    if opts.html_path is not None:
        outputs["html"] = str(opts.html_path)
    if result.unadapted_labels is not None:  # what the student said before adaptation, for comparison
        outputs["unadapted_labels"] = str(sibling(opts.output, ".unadapted"))
        write(sibling(opts.output, ".unadapted"), result.unadapted_labels, None)
    baseline = outcome.baseline
    if baseline is not None:
        outputs["baseline_labels"] = str(sibling(opts.output, ".baseline"))
        write(sibling(opts.output, ".baseline"), baseline.labels, baseline.confidences)
        if baseline.unadapted is not None:
            outputs["baseline_unadapted_labels"] = str(sibling(opts.output, ".baseline.unadapted"))
            write(sibling(opts.output, ".baseline.unadapted"), baseline.unadapted, None)
    return WrittenOutputs(labelled=n, outputs=outputs)


def page_images(setup: RunSetup, images: Images, outcome: RunOutcome) -> PageImages | None:
    """What ``--html`` shows of the images (None without ``--html``): the run's sample of releases and queries,
    and with ``--html-private`` the clean images of those releases and their file names (read from the spool)."""
    from ..report.label_page import PageImages

    opts, sample = setup.opts, outcome.result.sent_sample
    if opts.html_path is None:
        return None
    value_range = (float(setup.meta.value_range[0]), float(setup.meta.value_range[1]))
    if not opts.html_private or sample is None:
        return PageImages(sample=sample, value_range=value_range)
    idx = sample.release_indices
    lo, hi = value_range
    clean = (images.records.read(idx).float() - lo) / (hi - lo)
    names = images.printable_paths
    shown = {int(k) for k in idx} | {k for sources in sample.query_sources for k in sources}
    return PageImages(sample=sample, value_range=value_range, clean=clean, clean_names={k: names[k] for k in shown})


def write_page(setup: RunSetup, report: RunReport, page_images: PageImages) -> None:
    """Write the ``--html`` page (its path is in the report's ``outputs``), peer text escaped, secrets scrubbed."""
    from ..io.output import atomic_write_text, scrub
    from ..report.label_page import label_page

    path = setup.opts.html_path
    assert path is not None
    html = label_page(report, page_images, [str(n) for n in setup.meta.class_names or ()])
    atomic_write_text(path, scrub(html, (setup.token,)))


def sibling(output: Path, tag: str) -> Path:
    """``labels.csv`` -> ``labels<tag>.csv`` beside it."""
    return output.with_name(output.stem + tag + output.suffix)


def _no_conf(n: int) -> torch.Tensor:
    return torch.full((n,), float("nan"))
