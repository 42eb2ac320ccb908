"""What an Open Inference Protocol model is, read from its metadata document and the user's facts.

:class:`MetadataReader` turns ``GET /v2/models/{m}`` (and, when needed, Triton's ``.../config``
and the server's ``GET /v2`` extensions) plus the facts the user supplied (``num_classes=``,
``value_range=``, ``input_shape=`` ...) into a :class:`ModelDescription`: the
:class:`~ldpclient.teachers.TeacherMetadata` and the tensor names the codec needs. Real servers
publish less than the mock teacher (KServe's metadata has no ``parameters``): facts neither
published nor supplied are listed in ``TeacherMetadata.assumed``; a supplied fact that
contradicts the server's raises :class:`FactConflict` (a ``ValueError``: bad input, not a
teacher fault). Every number the server publishes is checked against
:class:`~ldpclient.teachers.limits.TeacherLimits`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from .base import TeacherMetadata
from .encoding import FLOAT_DATATYPES, INPUT_DATATYPES, INTEGER_DATATYPES
from .errors import MalformedResponse, TeacherError
from .limits import TeacherLimits

DEFAULT_VALUE_RANGE = (0.0, 1.0)
#: A JSON object a server published (its values unchecked).
Entry = dict[str, object]


@dataclass(frozen=True)
class ModelFacts:
    """The model facts the user supplied (None: not given), checked by :func:`check_facts`."""

    input_name: str | None = None
    output_name: str | None = None
    num_classes: int | None = None
    class_names: tuple[str, ...] | None = None
    datatype: str | None = None
    value_range: tuple[float, ...] | None = None
    input_shape: tuple[int, ...] | None = None
    max_batch_size: int | None = None


def _published_int(value: object) -> int:
    """A number the server published, as an int; ``TypeError`` for what is not a number (the caller's one-line
    malformed-metadata error)."""
    if isinstance(value, (int, float, str)):
        return int(value)
    raise TypeError(f"expected a number, got {type(value).__name__}")


def _published_float(value: object) -> float:
    if isinstance(value, (int, float, str)):
        return float(value)
    raise TypeError(f"expected a number, got {type(value).__name__}")


def _published_list(value: object) -> list[object]:
    if isinstance(value, list):
        return value
    raise TypeError(f"expected a list, got {type(value).__name__}")


@dataclass(frozen=True)
class ModelDescription:
    """An OIP model as this client will talk to it: its metadata and the tensors a request names.

    ``output_datatype``: the declared datatype of the output (upper case; ``""`` when undeclared);
    ``use_classification``: ask for Triton's classification extension on the output.
    """

    meta: TeacherMetadata
    input_name: str
    output_name: str
    output_datatype: str
    use_classification: bool


class MetadataReader:
    """Reads one model's description (see the module docstring).

    ``facts``: the user's facts; ``classification``: ``"auto"``, True or False; ``config_max_batch()``: the batch
    limit from the model's config endpoint, or None; ``server_extensions()``: the server's
    ``GET /v2`` document, or None. ``where``: the model's address as printed in errors.
    """

    def __init__(
        self,
        facts: ModelFacts,
        *,
        model: str,
        where: str,
        limits: TeacherLimits,
        classification: bool | str,
        config_max_batch: Callable[[], int | None],
        server_extensions: Callable[[], object],
    ) -> None:
        self.facts = facts
        self.model = model
        self.address = where
        self.limits = limits
        self._classification_opt = classification
        self._config_max_batch = config_max_batch
        self._server_extensions = server_extensions
        self.input_name = ""
        self.output_name = ""
        self.output_datatype = ""
        self.use_classification = False

    def read(self, md: object) -> ModelDescription:
        """The description from the metadata document ``md`` (raises on anything unusable)."""
        meta = self._parse_metadata(md)
        return ModelDescription(meta, self.input_name, self.output_name, self.output_datatype, self.use_classification)

    def _parse_metadata(self, md: object) -> TeacherMetadata:
        """TeacherMetadata from the metadata document ``md`` and the user's facts (see the class doc)."""
        where = self.address
        if not isinstance(md, dict):
            raise MalformedResponse(f"model metadata from {where} is not a JSON object: "
                                    f"{str(md)[:200]}", transient=False)
        params: Entry = md["parameters"] if isinstance(md.get("parameters"), dict) else {}
        inputs: list[object] = md["inputs"] if isinstance(md.get("inputs"), list) else []
        outputs: list[object] = md["outputs"] if isinstance(md.get("outputs"), list) else []
        inp = self._metadata_input(inputs, where)
        out = self._metadata_output(outputs, where)
        self.input_name, self.output_name = str(inp["name"]), str(out["name"])
        self.output_datatype = str(out.get("datatype", "")).upper()
        datatype = self._input_datatype(inp, where)
        input_shape, max_batch = self._input_shape(inp, params, where)
        if max_batch is None:
            max_batch = self._config_max_batch()
        classes = self._classes(params, out, where)
        if max_batch is not None:
            max_batch = min(max_batch, self.limits.max_batch_size)
        self._check_label_output(classes, where)
        self.use_classification = self._wants_classification(classes.scores)
        value_range, assumed = self._value_range(params, where)
        return TeacherMetadata(
            name=str(md.get("name") or self.model),
            input_shape=input_shape,
            datatype=datatype,
            num_classes=int(classes.num_classes),
            class_names=classes.names,
            max_batch_size=max_batch or None,
            value_range=(value_range[0], value_range[1]),
            assumed=tuple(assumed),
        )

    def _metadata_input(self, inputs: list[object], where: str) -> Entry:
        """The input tensor entry from metadata ``inputs`` (by ``input_name`` if given), else from the user's facts."""
        ov = self.facts
        if inputs:
            return pick_entry(inputs, ov.input_name, "input", where)
        if ov.input_name and ov.input_shape and ov.datatype:
            return {"name": ov.input_name, "datatype": ov.datatype, "shape": [-1, *ov.input_shape]}
        raise TeacherError(
            f"model metadata from {where} declares no inputs; pass input_name=, input_shape= and datatype= "
            "(CLI: --input-name, --input-shape, --datatype)"
        )

    def _metadata_output(self, outputs: list[object], where: str) -> Entry:
        """The output tensor entry: from metadata ``outputs`` (by ``output_name`` if given), else the user's name."""
        ov = self.facts
        if outputs:
            return pick_entry(outputs, ov.output_name, "output", where)
        if ov.output_name:
            return {"name": ov.output_name, "shape": [-1]}  # datatype: whatever the answers carry
        raise TeacherError(f"model metadata from {where} lists no outputs; pass output_name= (CLI: --output-name)")

    def _input_datatype(self, inp: Entry, where: str) -> str:
        """The wire datatype: the user's ``datatype`` or the input entry's ``datatype``; must be one we can send."""
        datatype = self.facts.datatype or str(inp.get("datatype", "")).upper()
        if datatype not in INPUT_DATATYPES:
            raise TeacherError(
                f"model at {where} takes {datatype or 'an undeclared datatype'}; supported: {INPUT_DATATYPES}"
                + ("" if datatype else " (pass datatype=, CLI --datatype)")
            )
        return datatype

    def _input_shape(
        self, inp: Entry, params: Entry, where: str
    ) -> tuple[tuple[int, ...], int | None]:
        """Per-record shape from the input's ``shape`` (batch axis dropped) and ``parameters.max_batch_size``."""
        ov = self.facts
        shape = [_published_int(s) for s in _published_list(inp.get("shape", []))]
        published_batch = params.get("max_batch_size")
        max_batch = ov.max_batch_size or (_published_int(published_batch) if published_batch is not None else None)
        if shape and shape[0] == -1:
            input_shape = tuple(shape[1:])
        elif len(shape) >= 2 and shape[0] == 1:  # fixed batch of one
            input_shape, max_batch = tuple(shape[1:]), 1
        else:
            input_shape = tuple(shape)
        if ov.input_shape is not None:
            if input_shape and all(s > 0 for s in input_shape) and input_shape != ov.input_shape:
                raise FactConflict(f"teacher {where} declares input shape {input_shape}, but {ov.input_shape} "
                                   "was given")
            input_shape = ov.input_shape
        if not input_shape or any(s < 1 for s in input_shape):
            raise TeacherError(
                f"model at {where} has a variable input shape {shape}; pass input_shape= (CLI: --input-shape C,H,W)"
            )
        self.limits.check_input_shape(input_shape, where)
        if max_batch is not None and max_batch < 1:
            raise MalformedResponse(f"teacher {where} publishes max_batch_size {max_batch} (must be >= "
                                    "1)", transient=False)
        return input_shape, max_batch

    def _classes(self, params: Entry, out: Entry, where: str) -> Classes:
        """Classes from ``parameters.num_classes``/``class_names``, else a float output's last ``shape`` axis."""
        ov = self.facts
        published_names = (tuple(str(c) for c in _published_list(params["class_names"]))
                           if params.get("class_names") else None)
        class_names = ov.class_names or published_names
        published = params.get("num_classes")
        published_k = None if published is None else _published_int(published)
        out_shape = [_published_int(s) for s in _published_list(out.get("shape", []))]
        scores = self.output_datatype in FLOAT_DATATYPES
        if published_k is None and scores and out_shape and out_shape[-1] > 0:
            published_k = out_shape[-1]
        num_classes = ov.num_classes or published_k or (len(class_names) if class_names else None)
        facts: tuple[tuple[str, object, object], ...] = (("num_classes", ov.num_classes, published_k),
                                                         ("class_names", ov.class_names, published_names))
        for label, given, published in facts:
            if given is not None and published is not None and given != published:
                if isinstance(given, tuple) and isinstance(published, tuple):  # class names: never echoed
                    raise FactConflict(  # (names given from a file: the file could be anything)
                        f"teacher {where} publishes {len(published)} class names that differ from the "
                        f"{len(given)} given (--class-names)"
                    )
                raise FactConflict(f"teacher {where} publishes {label} {published!r}, but {given!r} was given")
        if num_classes is None:
            raise TeacherError(
                f"teacher {where} does not publish its number of classes; pass num_classes= (CLI: --num-classes)"
            )
        if num_classes < 2:
            raise MalformedResponse(f"teacher {where} publishes {num_classes} classes (need >= 2)", transient=False)
        self.limits.check_classes(int(num_classes), where)
        return Classes(num_classes, class_names, scores)

    def _check_label_output(self, classes: Classes, where: str) -> None:
        """One name per class, and an output ``datatype`` (if declared) that holds labels or scores."""
        class_names, num_classes = classes.names, classes.num_classes
        if class_names is not None and len(class_names) != num_classes:
            raise FactConflict(f"{len(class_names)} class names for the {num_classes} classes of teacher {where}")
        if self.output_datatype and self.output_datatype not in INTEGER_DATATYPES + FLOAT_DATATYPES:
            raise TeacherError(f"model at {where}: output {self.output_name!r} is {self.output_datatype}, not "
                               "labels or scores")

    def _wants_classification(self, scores: bool) -> bool:
        """Use Triton's classification extension? ``auto``: for a scores output when ``GET /v2`` lists it."""
        if self._classification_opt != "auto":
            return bool(self._classification_opt)
        if not scores:
            return False
        server = self._server_extensions()
        return isinstance(server, dict) and "classification" in (server.get("extensions") or [])

    def _value_range(self, params: Entry, where: str) -> tuple[tuple[float, ...], list[str]]:
        """Input units from the user's ``value_range`` or ``parameters.value_range`` (else [0, 1], noted as assumed)."""
        ov = self.facts
        published = params.get("value_range")
        published_range = None if published is None else _published_list(published)
        assumed: list[str] = []
        value_range: tuple[float, ...]
        if ov.value_range is not None:
            value_range = ov.value_range
            if published_range is not None and tuple(_published_float(v) for v in published_range) != value_range:
                raise FactConflict(f"teacher {where} publishes value_range {list(published_range)}, but "
                                   f"{list(value_range)} was given")
        elif published_range is not None:
            value_range = tuple(_published_float(v) for v in published_range)
        else:
            value_range = DEFAULT_VALUE_RANGE
            assumed.append(f"value_range [{value_range[0]:g}, {value_range[1]:g}] (pass --value-range LO,HI if the "
                           "model expects other units)")
        if len(value_range) != 2 or not value_range[0] < value_range[1]:
            raise MalformedResponse(f"teacher {where} publishes value_range {list(value_range)} (need [low, "
                                    "high])", transient=False)
        return value_range, assumed


@dataclass(frozen=True)
class Classes:
    """The classes :meth:`MetadataReader._classes` settled on, passed on to the later metadata checks."""

    num_classes: int | float  # as given or published (a user's 4.0 stays 4.0 until TeacherMetadata)
    names: tuple[str, ...] | None
    scores: bool  # the output is a float (scores/logits) tensor


class FactConflict(ValueError):
    """A fact the user supplied contradicts what the server publishes (bad input, not a teacher fault)."""


def check_facts(
    num_classes: int | None,
    class_names: Sequence[str] | None,
    value_range: Sequence[float] | None,
    input_shape: Sequence[int] | None,
    max_batch_size: int | None,
) -> None:
    """ValueError naming the fact for any supplied model fact that cannot be right."""
    if num_classes is not None and (
        isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 2
    ):
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    if class_names is not None and (len(class_names) < 2 or len(set(class_names)) != len(class_names)):
        raise ValueError("class_names must hold at least 2 distinct names")
    if value_range is not None:
        if (
            len(value_range) != 2
            or not all(math.isfinite(float(v)) for v in value_range)
            or not value_range[0] < value_range[1]
        ):
            raise ValueError(f"value_range must be (low, high) with low < high, got {tuple(value_range)!r}")
    if input_shape is not None and (len(input_shape) < 1 or any(int(v) < 1 for v in input_shape)):
        raise ValueError(f"input_shape must be positive sizes, e.g. (1, 28, 28), got {tuple(input_shape)!r}")
    if max_batch_size is not None and max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")


def pick_entry(items: list[object], name: str | None, kind: str, where: str) -> Entry:
    if name is not None:
        for it in items:
            if isinstance(it, dict) and it.get("name") == name:
                return it
        names = [i.get("name") if isinstance(i, dict) else i for i in items]
        raise TeacherError(f"model at {where} has no {kind} named {name!r} (has {str(names)[:200]})")
    if not isinstance(items[0], dict) or "name" not in items[0]:
        raise TeacherError(f"model metadata at {where}: malformed {kind} entry {str(items[0])[:100]}")
    return items[0]


__all__ = ["DEFAULT_VALUE_RANGE", "FactConflict", "MetadataReader", "ModelDescription", "ModelFacts", "check_facts",
           "pick_entry"]
