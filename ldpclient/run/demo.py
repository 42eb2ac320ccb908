"""``ldpclient demo``: the whole story end to end, offline, on real digits, in under a minute.

1. Starts the bundled mock teacher on a free loopback port: a small CNN trained on
   60% of scikit-learn's digits resized to 28x28 (cached after the first start).
2. Writes :data:`PRIVATE_IMAGES` of the digits the teacher never saw as a folder of PNGs, the
   "private" data (all ten digits), and the true digits of :data:`CHECK_IMAGES` of them as a
   check set (``check.csv``, what a user would label by hand); the demo keeps the rest of the
   truth aside (never in the folder).
3. Runs the same flow as ``ldpclient label`` on that folder (LDPKiT-Sup), then SIDP (send the
   releases, take the teacher's answers), which reuses the very same releases from the ledger
   at no extra privacy cost.
4. Labels a second folder (:data:`FEW_CLASSES_FOLDER`): every digit of :data:`FEW_CLASSES` the
   teacher never trained on, with its data-free baseline beside it (blank records, epsilon 0:
   what the teacher gives away without private data). A data-free run cannot know which of the
   teacher's classes the images hold; the private releases tell the student: the case where
   privacy pays (chosen by measurement, with the gain's spread over repeated runs).
5. Prints each method's label accuracy against the truth, with the privacy guarantee per
   element and per record, the money spent, and what the privacy bought in the second case.
"""

from __future__ import annotations

import csv
import io
import shutil
import socket
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Union

import torch

from ..io.document import Document, JSONDict, integer, number, section, section_or_none
from ..io.folders import to_uint8_image
from ..io.output import atomic_save_image, atomic_write_text
from ..names import PRIVACY_BOUGHT
from ..privacy import defaults as privacy_defaults
from ..privacy.guarantee import coefficient_treatment, coefficients_named
from ..report.label_files import read_labels
from ..report.run_report import RunReport
from ..transfer import defaults
from .label import LabelOptions, label_run
from .ui import UI

if TYPE_CHECKING:
    from mock_server.runner import RunningServer

DEMO_PRICE = 0.001  # money per query charged by the demo's mock teacher
#: Where the demo's teacher listens when the port is free: where the README's next command finds the mock teacher
#: (``ldpclient serve-mock --port 8080``), so that the ledger files the demo's releases under the same teacher and
#: that command reuses them. Another port when it is taken.
DEMO_PORT = 8080
#: Private images of the demo's folder: the first of the digits the teacher never saw (all ten digits).
PRIVATE_IMAGES = 150
#: Private images whose true digit the demo writes to ``check.csv`` (the check set a user would label by hand).
CHECK_IMAGES = 100
#: The second folder's digits: every digit of these classes the teacher never trained on (the part it never saw and
#: its held-out part: 134 images), in :data:`FEW_CLASSES_FOLDER` beside the first folder.
FEW_CLASSES = (0, 1)
FEW_CLASSES_FOLDER = "two-digits"
#: How the table and the notes name the second folder's runs.
FEW_CLASSES_CASE = "digits 0 and 1 only"
#: Queries per image of the second folder's runs (and its baseline's) unless ``--queries`` is given: at 20 (label's
#: default) its verdict was "doubtful" in 2 of 8 demo runs; at 40 in none of 16 runs.
FEW_CLASSES_QUERIES_PER_IMAGE = 40


def write_private_folder(images: torch.Tensor, folder: Path, prefix: str = "record") -> list[str]:
    """Write ``(N, C, H, W)`` images in [0, 1] as ``folder/record_00000.png`` ... (``prefix`` names them); returns
    the relative paths.

    File names carry no label: like real private data, the folder is unlabelled.
    """
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for k, img in enumerate(images):
        name = f"{prefix}_{k:05d}.png"
        atomic_save_image(folder / name, to_uint8_image(img), sync=False)
        names.append(name)
    return names


def _accuracy(labels_csv: Path, truth: dict[str, int]) -> float:
    hits = sum(r.label == truth[r.path] for r in read_labels(labels_csv))
    return hits / len(truth)


@dataclass(frozen=True)
class _DemoOptions:
    """What each labelling method runs with (``run_demo``'s arguments, see its doc)."""

    queries: int | None
    epochs: int | None
    epsilon: float | None
    reduce: int | None
    adapt: bool
    postprocess: str | None
    html: Path | None = None


@dataclass(frozen=True)
class _PrivateData:
    """A private folder of the demo, its file names, their true labels kept aside, and the clean images."""

    folder: Path
    names: list[str]
    truth: dict[str, int]
    images: torch.Tensor  # (N, 1, 28, 28) in [0, 1]
    labels: torch.Tensor  # (N,) true digits


@dataclass(frozen=True)
class _Answers:
    """The label reports of LDPKiT-Sup and SIDP on the demo's folder and of LDPKiT-Sup (with its data-free
    baseline) on the second folder (None: not run), and the teacher's accuracy on the clean images (None:
    unknown)."""

    sup: RunReport
    sidp: RunReport
    reference: float | None
    few: RunReport | None = None


class DemoRow(TypedDict):
    """One method's row: accuracy against the true digits in [0, 1], epsilon per element and per record (``"inf"``:
    no privacy), queries sent or read back, money spent on its own queries."""

    method: str
    accuracy: float
    epsilon_element: Union[float, str]
    epsilon_record: Union[float, str]
    queries: int
    money: float


def run_demo(
    *,
    workdir: Path | None = None,
    queries: int | None = None,
    epochs: int | None = None,
    epsilon: float | None = None,
    reduce: int | None = None,
    adapt: bool = defaults.adapt(),
    seed: int = 0,
    teacher_epochs: int | None = None,
    postprocess: str | None = None,
    html: Path | None = None,
    ui: UI | None = None,
    two_digits: bool = True,
) -> JSONDict:
    """Run the demo (see module doc); returns rows ``{method, accuracy, epsilon_element, epsilon_record, queries,
    money}``.

    ``workdir``: where the private folders, labels and state go (default: a fresh
    temporary directory, removed afterwards). ``epsilon`` is per record (default
    :func:`ldpclient.privacy.defaults.epsilon`, Laplace, after average pooling by ``reduce``;
    ``reduce``/``postprocess`` ``None``: the label defaults); the per-element figure is reported too.
    ``queries``/``epochs``: per method; default: ``label``'s (:mod:`ldpclient.transfer.defaults`), but
    :data:`FEW_CLASSES_QUERIES_PER_IMAGE` per image in the second case.
    ``teacher_epochs``: train the mock teacher for this many epochs, uncached
    (tests); default: the mock server's own setting, cached after the first start.
    ``two_digits``: also run the second case, the folder of :data:`FEW_CLASSES` beside its data-free baseline.
    ``html``: write the LDPKiT-Sup run's page (``label --html-private``: the demo's private images are public
    digits, so they are shown beside their releases) to this file.
    """
    import mock_server

    ui = ui or UI(quiet=True)
    opts = _DemoOptions(queries, epochs, epsilon, reduce, adapt, postprocess, html)
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="ldpclient-demo-")
        root = Path(tmp.name)
    else:
        root = Path(workdir)
        root.mkdir(parents=True, exist_ok=True)
    try:
        data = write_demo_folder(root, seed, ui)
        few = write_few_classes_folder(root / FEW_CLASSES_FOLDER, seed, ui) if two_digits else None
        ui.info("demo: starting the mock teacher (trains a small CNN on other digits the first time; cached after)")
        with mock_server.serve(**_server_options(seed, teacher_epochs)) as server:
            answers = _run_methods(server, root, data, few, opts, ui)
        rows = _rows(root, data, few, answers, opts)
        notes = _notes(answers, rows, root, kept=tmp is None)
        if html is not None:  # out of the work directory, which may be a temporary one
            html.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(answers.sup.outputs["html"], html)
            notes.append(f"page: {html} (open it in a browser: what was sent, the guarantee, counts, the student)")
        return {"schema": 1, "command": "demo", "ok": True, "records": len(data.names), "rows": rows, "notes": notes}
    finally:
        if tmp is not None:
            tmp.cleanup()


def write_demo_folder(root: Path, seed: int = 0, ui: UI | None = None, *,
                      count: int | None = PRIVATE_IMAGES) -> _PrivateData:
    """The demo's private data under ``root``: ``private/``, the first ``count`` (None: all 359) of the digits
    (28x28 PNGs) that the mock teacher started with ``seed`` never saw, and ``check.csv``, the true digits of the
    first :data:`CHECK_IMAGES` of them (what a user would label by hand); the other true digits are only
    returned."""
    from ..io.datasets import DIGITS_TEACHER_SPLIT, load_digits_images, split_indices

    images, labels = load_digits_images(28)
    _, _, unseen = split_indices(len(labels), DIGITS_TEACHER_SPLIT, seed)
    return _write_private_data(root / "private", images, labels, unseen[:count], ui or UI(quiet=True))


def write_few_classes_folder(root: Path, seed: int = 0, ui: UI | None = None) -> _PrivateData:
    """The second case's private data under ``root`` (as :func:`write_demo_folder` writes the first's): every digit
    of :data:`FEW_CLASSES` the mock teacher started with ``seed`` never trained on (the part it never saw, then its
    held-out part), in ``private/``, with ``check.csv``."""
    from ..io.datasets import DIGITS_TEACHER_SPLIT, load_digits_images, split_indices

    images, labels = load_digits_images(28)
    _, held_out, unseen = split_indices(len(labels), DIGITS_TEACHER_SPLIT, seed)
    pool = torch.cat([unseen, held_out])
    chosen = pool[torch.isin(labels[pool], torch.tensor(FEW_CLASSES))]
    return _write_private_data(root / "private", images, labels, chosen, ui or UI(quiet=True))


def _write_private_data(
    private: Path, images: torch.Tensor, labels: torch.Tensor, chosen: torch.Tensor, ui: UI
) -> _PrivateData:
    """Write the digits ``chosen`` (indices) as PNGs in ``private``, and the truth of the first
    :data:`CHECK_IMAGES` of them as the check set ``check.csv`` beside the folder (what a user would label by hand);
    the rest of the truth is kept aside."""
    names = write_private_folder(images[chosen], private)
    truth = {name: int(labels[i]) for name, i in zip(names, chosen.tolist(), strict=True)}
    write_check_file(check_file_for(private), {name: truth[name] for name in names[:CHECK_IMAGES]})
    ui.info(f"demo: {len(names)} private digit images (28x28) written to {private}; the true digits of "
            f"{min(CHECK_IMAGES, len(names))} of them in {check_file_for(private)} (the check set), the rest kept "
            "aside")
    return _PrivateData(private, names, truth, images[chosen], labels[chosen])


def check_file_for(private: Path) -> Path:
    """The demo's check set of a private folder: ``check.csv`` beside it."""
    return private.parent / "check.csv"


def write_check_file(path: Path, labels: dict[str, int]) -> None:
    """Write hand labels as ``--check`` reads them: a ``file,label`` header, then one row per image."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["file", "label"])
    writer.writerows(sorted(labels.items()))
    atomic_write_text(path, buffer.getvalue())


class _ServerOptions(TypedDict, total=False):
    """The options of ``mock_server.serve`` the demo sets."""

    model: str
    image_size: int
    seed: int
    price_per_image: float
    port: int
    epochs: int
    no_cache: bool


def _server_options(seed: int, teacher_epochs: int | None) -> _ServerOptions:
    """Options for ``mock_server.serve``: the 28x28 digits teacher at :data:`DEMO_PRICE` per query."""
    server_options: _ServerOptions = {"model": "digits", "image_size": 28, "seed": seed, "price_per_image": DEMO_PRICE,
                                      "port": DEMO_PORT if _port_free(DEMO_PORT) else 0}
    if teacher_epochs is not None:
        server_options.update({"epochs": teacher_epochs, "no_cache": True})
    return server_options


def _port_free(port: int) -> bool:
    """Whether ``port`` on 127.0.0.1 can be listened on now (as the mock teacher binds: reusing an address that
    only closed connections still hold)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _run_methods(server: RunningServer, root: Path, data: _PrivateData, few: _PrivateData | None,
                 opts: _DemoOptions, ui: UI) -> _Answers:
    """Run LDPKiT-Sup then SIDP on the demo's folder, then LDPKiT-Sup with its data-free baseline on the second
    folder, against the running mock ``server``; outputs under ``root``."""
    url = server.model_url
    reference = _teacher_on_clean(server, data.images, data.labels)
    ui.info(f"demo: mock teacher at {url}")
    common = LabelOptions(
        private_dir=data.folder,
        teacher=url,
        mechanism=privacy_defaults.mechanism(),
        epsilon=privacy_defaults.epsilon() if opts.epsilon is None else opts.epsilon,
        epsilon_unit="record",
        reduce=opts.reduce,
        postprocess=opts.postprocess,
        price=DEMO_PRICE,
        epochs=defaults.epochs() if opts.epochs is None else opts.epochs,
        state_dir=root / "state",
        seed=None,
    )
    ui.info("demo: LDPKiT-Sup (noise each image once, query averages of pairs, train a student)")
    sup = RunReport.from_dict(label_run(
        replace(common, augment="sup", queries=opts.queries, adapt=opts.adapt, output=root / "labels_sup.csv",
                html_private=opts.html is not None, check=check_file_for(data.folder)),
        ui=ui,
    ).report)
    ui.stop_progress()
    ui.info("demo: SIDP (send the same releases, take the teacher's answers as labels)")
    sidp = RunReport.from_dict(label_run(replace(common, augment="none", output=root / "labels_sidp.csv"),
                                         ui=ui).report)
    ui.stop_progress()
    report = None
    if few is not None:
        ui.info(f"demo: LDPKiT-Sup on a folder of the {FEW_CLASSES_CASE}, beside its data-free baseline")
        report = RunReport.from_dict(label_run(
            replace(common, private_dir=few.folder, augment="sup", adapt=opts.adapt,
                    queries=opts.queries or FEW_CLASSES_QUERIES_PER_IMAGE * len(few.names),
                    baseline=True, output=root / "labels_few.csv", check=check_file_for(few.folder)),
            ui=ui,
        ).report)
        ui.stop_progress()
    return _Answers(sup, sidp, reference, report)


def _rows(root: Path, data: _PrivateData, few: _PrivateData | None, answers: _Answers,
          opts: _DemoOptions) -> list[DemoRow]:
    """One row per method (accuracy in [0, 1], epsilon per element and per record, queries, money spent)."""
    sup, sidp, reference, truth = answers.sup, answers.sidp, answers.reference, data.truth
    adapted = ", adapted" if opts.adapt else ""
    rows = [_row(f"LDPKiT-Sup{adapted}", _accuracy(root / "labels_sup.csv", truth), sup)]
    if "unadapted_labels" in sup.outputs:  # same run, same queries: the student before adaptation
        rows.append({**rows[0], "method": "LDPKiT-Sup, unadapted", "money": 0.0,
                     "accuracy": _accuracy(Path(sup.outputs["unadapted_labels"]), truth)})
    rows.append(_row("SIDP", _accuracy(root / "labels_sidp.csv", truth), sidp))
    if answers.few is not None and few is not None:
        rows.append(_row(f"LDPKiT-Sup{adapted}, {FEW_CLASSES_CASE}", _accuracy(root / "labels_few.csv", few.truth),
                         answers.few))
        if answers.few.baseline:
            rows.append(_baseline_row(f"data-free baseline{adapted}, {FEW_CLASSES_CASE}",
                                      _accuracy(Path(answers.few.outputs["baseline_labels"]), few.truth),
                                      answers.few.baseline))
    if reference is not None:
        n = len(data.names)
        rows.append(
            {"method": "teacher on clean images", "accuracy": reference, "epsilon_element": "inf",
             "epsilon_record": "inf", "queries": n, "money": n * DEMO_PRICE}
        )
    return rows


#: What the run's verdict concluded of the gain (``verdict.privacy_bought``), in the demo's words.
BOUGHT_WORDS = dict(zip(PRIVACY_BOUGHT, ("a measurable gain (the verdict's sign test)",
                                         "no measurable gain (the verdict's sign test)",
                                         "measurably worse labels (the verdict's sign test)"), strict=True))
#: What the second case means for the user's own images, after its measured gain.
FEW_CLASSES_MEANING = (
    "a data-free run cannot know which of the teacher's classes your images hold, and spreads its labels over all of "
    "them; the private releases tell the student. Where your images' class mix is unlike the teacher's, privacy "
    "pays. On a folder of every class the data-free labels are often nearly as good: run --baseline "
    "beside the private run on your own images and spend privacy only where it measurably wins.")


def _gain_notes(rows: list[DemoRow], answers: _Answers) -> list[str]:
    """What the privacy bought in the second case: the points over its data-free run on its folder, what the run's
    verdict concluded from the check set, and what the case means for the user's own images (none without the
    second case)."""
    accuracy = {r["method"].replace(", adapted", ""): r["accuracy"] for r in rows}
    private, free = f"LDPKiT-Sup, {FEW_CLASSES_CASE}", f"data-free baseline, {FEW_CLASSES_CASE}"
    report = answers.few
    if private not in accuracy or free not in accuracy or report is None:
        return []
    points = 100 * (accuracy[private] - accuracy[free])
    bought = (report.verdict or {}).get("privacy_bought")
    said = f"; on the check set, {BOUGHT_WORDS[bought]}" if bought in BOUGHT_WORDS else ""
    return [f"what the privacy bought on the folder of the {FEW_CLASSES_CASE}: {100 * accuracy[private]:.1f}% "
            f"against {100 * accuracy[free]:.1f}% for its data-free run, {points:+.1f} points{said}. What it means: "
            f"{FEW_CLASSES_MEANING}",
            f"that gain is measured on the {report.counts.labelled} digits of that folder in this one run (the "
            "release noise is new each run, so it moves by several points; README.md gives the spread over runs)."]


def _notes(answers: _Answers, rows: list[DemoRow], root: Path, *, kept: bool) -> list[str]:
    """The report's notes: what each method is, the privacy guarantee, the money spent, where outputs are kept."""
    g = answers.sup.guarantee
    notes = [
        "LDPKiT-Sup: what `ldpclient label` does (noise each image once, query averages of pairs, train a "
        "student). SIDP: send the same releases and take the teacher's answers. Data-free baseline: the same "
        "pipeline on blank images (no private information). Adapted: the student was then fine-tuned on the "
        "clean private images on this device (no query, no privacy cost; unadapted rows are the same run's "
        "student before that). Teacher on clean images: the reference you would get by sending the raw images "
        "(no privacy at all; not done by ldpclient).",
        f"privacy: each private image was noised once; per record epsilon "
        f"{number(section(g, 'per_record'), 'epsilon'):.4g} "
        f"{_released(g)}. {_reuse(answers)}",
        "per record is what bounds what the teacher can learn about one whole image; it is large here, "
        "so read the accuracy against the data-free baseline, which uses no private information at all.",
        f"money: {sum(r['money'] for r in rows):.4g} in total at {DEMO_PRICE} per query (mock prices): "
        + "; ".join(f"{r['method']} {r['money']:.4g}" for r in rows if r["money"]) + ".",
    ]
    notes[1:1] = _gain_notes(rows, answers)
    few = answers.few.verdict if answers.few is not None else None
    if few:
        notes.insert(0, f"verdict on the labels of the folder of the {FEW_CLASSES_CASE}: {few['headline']}")
    verdict = answers.sup.verdict
    if verdict:
        notes.insert(0, f"verdict on the LDPKiT-Sup labels (what every label run says): {verdict['headline']}")
        if check := section_or_none(verdict, "check"):
            notes.insert(1, "accuracy: the table's is against the true digits of all "
                            f"{answers.sup.counts.labelled} "
                            f"private images (the demo knows them); the verdict's is estimated from the "
                            f"{check['images']} hand-labelled images of the check set, as a run on your "
                            "own images, without the truth, estimates it.")
    if kept:
        notes.append(f"outputs and state kept in {root}; label that folder yourself with a mock teacher running "
                     f"(ldpclient serve-mock --port 8080): ldpclient label {root / 'private'} --teacher "
                     f"http://127.0.0.1:8080/v2/models/digits --check {check_file_for(root / 'private')} "
                     f"--state-dir {root / 'state'} --baseline --html (this state's ledger holds the demo's releases: "
                     "none is noised again)")
    return notes


def _reuse(answers: _Answers) -> str:
    """How the later runs came by a release of every image: SIDP's from LDPKiT-Sup's (and any its queries did not
    use), the second folder's from the first folder's where they are the same images."""
    fresh, reused = answers.sidp.ledger.fresh, answers.sidp.ledger.reused
    said = (f"SIDP reused the stored releases: 0 images noised again ({reused} reused)." if not fresh else
            f"SIDP sends a release of every image: it reused the {reused} stored by LDPKiT-Sup and noised the "
            f"{fresh} its queries did not use (released once each, now).")
    if answers.few is not None:
        led = answers.few.ledger
        said += (f" The folder of the {FEW_CLASSES_CASE} reused the releases of {led.reused} images it shares with "
                 f"the first folder and noised {led.fresh} others once each.")
    return said


def _released(g: Document) -> str:
    """What one release holds, for the privacy note: the coefficients of a release in a basis, else elements."""
    params = section_or_none(g, "params") or {}
    named = coefficients_named(params)
    if named is not None:
        return (f"on {g['elements_per_record']} {named} of the image (one record-level "
                f"release, {coefficient_treatment(params)})")
    return f"over {g['elements_per_record']} released elements (per element {section(g, 'per_element')['epsilon']:.4g})"


def _teacher_on_clean(server: RunningServer, images: torch.Tensor, labels: torch.Tensor) -> float | None:
    """Accuracy of the mock teacher on the clean private images, computed in-process for reference only."""
    model = getattr(server, "teacher", None)
    if model is None:
        return None
    predicted = model.predict_fn(images.numpy())
    return float((torch.as_tensor(predicted).reshape(-1) == labels).float().mean())


def _row(method: str, accuracy: float, report: RunReport) -> DemoRow:
    g = report.guarantee
    return {
        "method": method,
        "accuracy": accuracy,
        "epsilon_element": number(section(g, "per_element"), "epsilon"),
        "epsilon_record": number(section(g, "per_record"), "epsilon"),
        "queries": report.queries.sent + report.queries.from_journal,
        "money": report.queries.sent * DEMO_PRICE,  # this method's own queries (not the baseline's)
    }


def _baseline_row(method: str, accuracy: float, baseline: Document) -> DemoRow:
    """A data-free run's row: epsilon 0, its queries sent and read back, the money of those it sent."""
    sent = integer(baseline, "queries_sent")
    return {"method": method, "accuracy": accuracy, "epsilon_element": 0.0, "epsilon_record": 0.0,
            "queries": sent + integer(baseline, "queries_from_journal"), "money": sent * DEMO_PRICE}
