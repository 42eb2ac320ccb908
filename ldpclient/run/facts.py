"""What the user knows about the teacher's model that its server may not publish.

Stock servers publish little: KServe's metadata has no ``parameters`` (so no number
of classes, value range or class names), some models declare no inputs at all.
:class:`TeacherFacts` carries the CLI's ``--num-classes``, ``--class-names FILE``,
``--value-range LO,HI``, ``--input-shape C,H,W``, ``--input-name``,
``--output-name``, ``--datatype`` and ``--wire`` to :func:`ldpclient.teachers.connect`
(the same keys work in the ``--config`` TOML file); for the teachers that are chat models also ``--model``, the
class descriptions of a ``--class-names`` JSON object, and the token prices ``--price-input-tokens`` and
``--price-output-tokens`` (money per million tokens) and ``--batch`` (its Batch API); for a vision API the
``--label-map`` of its labels to the
classes. Importing this module is cheap
(no torch).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..teachers.limits import MAX_CLASS_NAME_CHARS
from .network import NetworkOptions

WIRE_CHOICES = ("auto", "binary", "json")  # == ldpclient.teachers.wire.WIRE_FORMATS (checked by a test)


@dataclass(frozen=True)
class TeacherFacts:
    """Model facts supplied by the user (None = ask the server) and the request wire format.

    ``value_range``: the units the model's inputs are in, e.g. ``(0, 255)``;
    ``input_shape``: per record without the batch axis, e.g. ``(1, 28, 28)``. ``model``: the model's name at an
    API that serves several (chat APIs); ``class_descriptions``: class name -> one line, for a chat model's prompt;
    ``price_input_tokens``/``price_output_tokens``: money per million tokens, for teachers billed in tokens;
    ``image_tokens``: the input tokens one image costs at such a teacher (else its family's published rule);
    ``batch_api``: ask a chat teacher through its Batch API.
    """

    wire: str = "auto"
    num_classes: int | None = None
    class_names: tuple[str, ...] | None = None
    value_range: tuple[float, float] | None = None
    input_shape: tuple[int, ...] | None = None
    input_name: str | None = None
    output_name: str | None = None
    datatype: str | None = None
    model: str | None = None
    class_descriptions: tuple[tuple[str, str], ...] | None = None
    price_input_tokens: float | None = None
    price_output_tokens: float | None = None
    image_tokens: int | None = None
    label_map: Path | None = None
    batch_api: bool = False

    @property
    def token_priced(self) -> bool:
        """Whether token prices were given (the teacher then prices its own answers)."""
        return bool(self.price_input_tokens or self.price_output_tokens)

    @classmethod
    def from_options(
        cls,
        *,
        wire: str = "auto",
        num_classes: int | None = None,
        class_names: Path | None = None,
        value_range: str | None = None,
        input_shape: str | None = None,
        input_name: str | None = None,
        output_name: str | None = None,
        datatype: str | None = None,
        model: str | None = None,
        price_input_tokens: float | None = None,
        price_output_tokens: float | None = None,
        image_tokens: int | None = None,
        label_map: Path | None = None,
        batch_api: bool = False,
    ) -> "TeacherFacts":
        """Parse the CLI's strings; ValueError naming the option for anything unusable."""
        if wire not in WIRE_CHOICES:
            raise ValueError(f"--wire must be one of {', '.join(WIRE_CHOICES)}, got {wire!r}")
        if num_classes is not None and num_classes < 2:
            raise ValueError(f"--num-classes must be >= 2, got {num_classes}")
        for option, price in (
            ("--price-input-tokens", price_input_tokens),
            ("--price-output-tokens", price_output_tokens),
        ):
            if price is not None and not (math.isfinite(price) and price >= 0):
                raise ValueError(f"{option} must be a finite number >= 0 (money per million tokens), got {price}")
        if image_tokens is not None and image_tokens < 1:
            raise ValueError(f"--image-tokens must be >= 1 (input tokens one image costs), got {image_tokens}")
        described = read_class_descriptions(class_names) if class_names is not None else None
        names = tuple(n for n, _ in described) if described is not None else None
        if names is not None and num_classes is not None and len(names) != num_classes:
            raise ValueError(f"--class-names {str(class_names)!r} has {len(names)} names but --num-classes is "
                             f"{num_classes}")
        return cls(
            wire=wire,
            num_classes=num_classes,
            class_names=names,
            value_range=_value_range(value_range) if value_range is not None else None,
            input_shape=_shape(input_shape) if input_shape is not None else None,
            input_name=input_name or None,
            output_name=output_name or None,
            datatype=datatype.upper() if datatype else None,
            model=model or None,
            class_descriptions=tuple((n, d) for n, d in described or () if d) or None,
            price_input_tokens=price_input_tokens,
            price_output_tokens=price_output_tokens,
            image_tokens=image_tokens,
            label_map=label_map,
            batch_api=bool(batch_api),
        )

    def supplied(self) -> dict[str, Any]:
        """The facts that were given, as keyword arguments of the teacher adapters."""
        keys = ("num_classes", "class_names", "value_range", "input_shape", "input_name", "output_name", "datatype",
                "model", "price_input_tokens", "price_output_tokens", "image_tokens", "label_map")
        out = {k: getattr(self, k) for k in keys if getattr(self, k) is not None}
        if self.class_descriptions:
            out["class_descriptions"] = dict(self.class_descriptions)
        if self.batch_api:
            out["batch"] = True
        return out


def read_class_descriptions(path: Path) -> tuple[tuple[str, str], ...]:
    """``(name, description)`` per class from a file, in index order: a JSON object of name -> one-line
    description (for a chat model's prompt), a JSON list of names, or one name per line; description "" where
    none is given."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--class-names: cannot read {str(path)!r}: {exc}") from None
    names: list[str]
    about: dict[str, str] = {}
    if text.lstrip().startswith(("[", "{")):
        try:
            loaded = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"--class-names {str(path)!r}: not a JSON list or object of names ({exc})") from None
        if isinstance(loaded, dict):
            names = [str(k) for k in loaded]
            about = {str(k): " ".join(str(v or "").split()) for k, v in loaded.items()}
            if any(len(d) > 200 for d in about.values()):
                raise ValueError(f"--class-names {str(path)!r}: a description is over 200 characters (one line each)")
        else:
            names = [str(v) for v in loaded] if isinstance(loaded, list) else []
    else:
        names = [line.strip() for line in text.splitlines() if line.strip()]
    if len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"--class-names {str(path)!r} must hold at least 2 distinct names (one per line)")
    if any(len(n) > MAX_CLASS_NAME_CHARS for n in names):
        raise ValueError(f"--class-names {str(path)!r} holds a name over {MAX_CLASS_NAME_CHARS} characters")
    return tuple((n, about.get(n, "")) for n in names)


def _numbers(spec: str, option: str) -> list[float]:
    try:
        return [float(v) for v in spec.replace("x", ",").split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{option} must be comma-separated numbers, got {spec!r}") from None


def _value_range(spec: str) -> tuple[float, float]:
    values = _numbers(spec, "--value-range")
    if len(values) != 2 or not all(math.isfinite(v) for v in values) or not values[0] < values[1]:
        raise ValueError(f"--value-range must be LO,HI with LO < HI (e.g. 0,255), got {spec!r}")
    return values[0], values[1]


def _shape(spec: str) -> tuple[int, ...]:
    values = _numbers(spec, "--input-shape")
    if len(values) != 3 or any(v != int(v) or v < 1 for v in values):
        raise ValueError(f"--input-shape must be C,H,W positive integers (e.g. 1,28,28), got {spec!r}")
    return tuple(int(v) for v in values)


#: The options of how to reach a teacher (:class:`~ldpclient.run.network.NetworkOptions`), by name.
NETWORK_OPTIONS = frozenset(f.name for f in dataclasses.fields(NetworkOptions))
#: The options of what a teacher may not publish (:meth:`TeacherFacts.from_options`), by name.
FACT_OPTIONS = frozenset(inspect.signature(TeacherFacts.from_options).parameters)


def teacher_options(values: Mapping[str, Any]) -> tuple[NetworkOptions, TeacherFacts]:
    """The network options and the teacher's facts among ``values`` (by option name: ``timeout``, ``wire``, ...;
    other names are not read); ValueError names an unusable option."""
    network = NetworkOptions(**{key: value for key, value in values.items() if key in NETWORK_OPTIONS})
    return network, TeacherFacts.from_options(**{key: value for key, value in values.items() if key in FACT_OPTIONS})


__all__ = ["FACT_OPTIONS", "NETWORK_OPTIONS", "TeacherFacts", "WIRE_CHOICES", "read_class_descriptions",
           "teacher_options"]
