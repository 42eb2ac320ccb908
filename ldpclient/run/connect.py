"""Opening the teacher a label or noise run names: the facts and transport options it takes, one-line refusals."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from ..teachers.http import redact_url
from .facts import TeacherFacts
from .network import NetworkOptions

if TYPE_CHECKING:
    from ..teachers.base import Teacher


def teacher_options(address: str, facts: TeacherFacts, state: Path) -> dict[str, object]:
    """The model facts the user supplied (the class descriptions for chat teachers only); for Open Inference
    Protocol teachers also the wire format, whose ``auto`` choice is remembered in the state directory ``state``."""
    from ..teachers.registry import resolve

    adapter = resolve(address)[0]
    out: dict[str, object] = facts.supplied()
    if adapter != "openai":  # a prompt's words: only a chat model reads them
        out.pop("class_descriptions", None)
        if facts.batch_api:
            raise ValueError("--batch applies to chat teachers (openai+https://host/v1) only")
    if adapter == "oip":
        out.update(wire=facts.wire, state_dir=state)
    elif facts.wire != "auto":
        raise ValueError("--wire applies to Open Inference Protocol teachers (http://, oip+http://) only")
    return out


def connect_options(address: str, facts: TeacherFacts, network: NetworkOptions, state: Path) -> dict[str, object]:
    """Options for :func:`~ldpclient.teachers.connect`: :func:`teacher_options`, and for URL adapters
    the transport's timeouts, retry budget and CA bundle (:class:`~ldpclient.run.network.NetworkOptions`)."""
    return {**teacher_options(address, facts, state), **network.transport_options(address)}


def open_teacher(address: str, token: str | None, options: Mapping[str, object]) -> Teacher:
    """:func:`~ldpclient.teachers.connect`, after a one-line refusal of a supplied fact the adapter does not
    declare (:func:`~ldpclient.teachers.registry.unknown_options`)."""
    from ..teachers import connect
    from ..teachers.registry import unknown_options

    unknown = unknown_options(address, options)
    if unknown:
        raise ValueError(
            f"the teacher adapter for {redact_url(address)!r} does not take --{unknown[0].replace('_', '-')}"
        )
    return connect(address, token=token, **options)
