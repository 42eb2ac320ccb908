"""The keyword options of :func:`ldpclient.label`, each with its type and meaning: the options of ``ldpclient
label`` by their Python names (the command line's spellings for the teacher's facts), with the command's defaults
where left out. A test holds the keys to the run's options (:class:`~ldpclient.run.options.LabelOptions`, the
teacher's facts and the network options), so none is missing or extra.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, TypedDict, Union

if TYPE_CHECKING:
    import torch

    from ..io.records import RecordSource

#: A file or folder, as a path or its text.
PathLike = Union[str, "os.PathLike[str]", Path]

__all__ = ["LabelKeywords", "PathLike"]


class LabelKeywords(TypedDict, total=False):
    """Options of :func:`ldpclient.label` (all optional; units as the command line's help gives them)."""

    # -- privacy --------------------------------------------------------------------------------------------
    #: Privacy parameter epsilon (nats) in ``epsilon_unit``; 0: data-free, nothing private is sent.
    epsilon: float
    #: The LDP mechanism: a name of :func:`ldpclient.privacy.mechanisms.mechanism_names` (``"laplace"``).
    mechanism: str
    #: Whether ``epsilon`` counts per released ``"element"`` or per whole ``"record"`` (the default).
    epsilon_unit: str
    #: Delta of the Gaussian mechanisms (same unit as ``epsilon``).
    delta: float | None
    #: Draw the noise on the secure integer path (default True).
    secure: bool
    #: Accept a delta above 1e-2.
    allow_large_delta: bool
    #: Accept a per-record epsilon above the ceiling (:func:`ldpclient.privacy.defaults.epsilon_ceiling`).
    allow_weak_privacy: bool
    #: Average-pool records by this factor before noise.
    reduce: int | None
    #: What the noise is added to: ``"pool"`` (pixels), ``"dct"`` (low-frequency coefficients) or ``"pca"`` (the
    #: leading principal components of the public images).
    basis: str | None
    #: ``basis="dct"`` or ``"pca"``: the (luminance) coefficients kept per record.
    coefficients: int | None
    #: ``basis="dct"`` or ``"pca"``: the norm bound of each record's coefficient vector.
    clip_norm: float | None
    #: Post-processing of releases, e.g. ``"blur:2,clip"``.
    postprocess: str | None
    #: Per-image epsilon cap the ledger enforces (tightens the cap it holds).
    privacy_cap: float | None
    #: LDPKiT query expansion: ``"sup"``, ``"rand"`` or ``"none"`` (the releases sent as they are).
    augment: str
    #: Send the releases decoded into the public images: ``"auto"`` (when the teacher's answers on
    #: a check say it helps), ``"none"`` or ``"always"``.
    decode: str
    # -- queries and money ----------------------------------------------------------------------------------
    #: Teacher queries in all (default: 20 per private image).
    queries: int | None
    #: Send the queries in up to this many rounds, stopping when a round stops helping.
    query_rounds: int
    #: Queries per request (default: the teacher's most).
    batch_size: int | None
    #: Requests in flight at once.
    workers: int
    #: Price per query (image) for the cost meter.
    price: float
    #: Largest total spend with this teacher over every run on this state.
    money_cap: float | None
    #: Money per million input and output tokens (teachers billed in tokens).
    price_input_tokens: float | None
    price_output_tokens: float | None
    #: Input tokens one image costs at a chat teacher (default: its model family's published rule).
    image_tokens: int | None
    #: Ask a chat teacher through its Batch API.
    batch_api: bool
    # -- the teacher's facts and the network ----------------------------------------------------------------
    #: Request bodies of an Open Inference Protocol teacher: ``"auto"``, ``"binary"`` or ``"json"``.
    wire: str
    #: Number of classes, when the server does not publish it.
    num_classes: int | None
    #: File of class names in index order, one per line.
    class_names: PathLike | None
    #: ``"LO,HI"``: the units the model's inputs are in.
    value_range: str | None
    #: ``"C,H,W"`` of one input, when the server does not declare it.
    input_shape: str | None
    #: Input and output tensor names, when the model has several.
    input_name: str | None
    output_name: str | None
    #: Input datatype the model takes (``"FP32"``, ``"UINT8"``, ...).
    datatype: str | None
    #: The model's name, at an API that serves several.
    model: str | None
    #: JSON object of class name -> the teacher's labels that count as that class.
    label_map: PathLike | None
    #: Seconds to wait for one response; seconds to keep retrying a failing request.
    timeout: float
    max_retry_time: float
    #: CA bundle for TLS verification.
    ca_bundle: PathLike | None
    # -- the student ----------------------------------------------------------------------------------------
    #: Also run the data-free baseline beside the private run.
    baseline: bool
    #: Fine-tune the student on the clean private images (default True).
    adapt: bool
    #: Student model: a name of :data:`ldpclient.names.STUDENT_NAMES` (default: by image size).
    student: str | None
    #: A weights file the student starts from (torchvision state dict or TorchScript feature extractor).
    student_weights: PathLike | None
    #: Also train on mirrored images (None: decided by a check on the public images).
    flip: bool | None
    #: Epochs of rotation warm-up on the clean private images before training.
    warmup: int
    #: Students trained on the same answers, the labels from their mean output.
    students: int
    #: Student training epochs and batch size.
    epochs: int
    train_batch_size: int
    #: Where the student trains: ``"cpu"``, ``"cuda"``, ...
    device: str
    # -- images, outputs and state --------------------------------------------------------------------------
    #: Images you state are not private, sent as they are: a folder, or a tensor or RecordSource like ``images``.
    public: PathLike | torch.Tensor | RecordSource | None
    #: Leave out the public images found to be private ones (each listed in the report) instead of refusing.
    public_skip_copies: bool
    #: Hand labels of some of the images: a ``file,label`` CSV, or a mapping name -> class name or index.
    check: PathLike | Mapping[str, str | int] | None
    #: Skip images with more pixels than this.
    max_pixels: int
    #: GiB a run may need (refused beyond).
    max_memory: float | None
    #: Labels format: ``"csv"`` or ``"jsonl"`` (default: from ``output``'s suffix).
    format: str | None
    #: Run report JSON (default: beside ``output``).
    report: PathLike | None
    #: Also write a page beside the labels; with ``html_private``, the clean private images on it.
    html: bool
    html_private: bool
    #: State directory: the ledger, the journal and the plan seeds.
    state_dir: PathLike | None
    #: A ``postgresql://`` URL: ledger, journal and plan seeds shared by hosts.
    state: str | None
    #: The ledger's secret key file (a copy on every host that shares ``state``).
    ledger_key_file: PathLike | None
    #: ``"auto"`` or a Ray address: release and label the images on a cluster (needs ``state``).
    cluster: str | None
    #: Seed all randomness, noise included (tests only).
    seed: int | None
