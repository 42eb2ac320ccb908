"""The query-plan seed of each run configuration: ``runs.json`` in the state directory, or the query journal's
``plans`` table in a PostgreSQL state (``--state``), where hosts that run one configuration get one seed."""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from pathlib import Path
from typing import Sequence

from ..io.document import Document, JSONDict, integer
from ..io.output import write_json
from ..state import check_schema

#: ``runs.json``'s schema (its ``"_schema"`` entry): 1 before it was written there, 2 now.
SCHEMA_VERSION = 2
_SCHEMA_KEY = "_schema"


class RunState:
    """``runs.json`` in the state directory: the query-plan seed of each run configuration.

    The plan seed decides which pairs/noise copies are queried; keeping it makes a
    re-run produce the same batches (same ids, same queries), which the journal then
    answers without sending. It is not a privacy secret: the queries are functions
    of the releases, which the teacher sees anyway.
    """

    def __init__(self, directory: Path, *, database: str | None = None) -> None:
        self.path = directory / "runs.json"
        #: A ``postgresql://`` URL: the seeds are kept in its ``plans`` table instead of the file.
        self.database = database

    def seed_for(
        self, key: Document, explicit: int | None, legacy_keys: Sequence[Document] = ()
    ) -> int:
        """The plan seed of the run ``key`` names: ``explicit``, else the one stored for ``key`` (or, once,
        for one of ``legacy_keys``: how an older ldpclient keyed the same run), else a new random one."""
        if explicit is not None:
            return int(explicit)
        digest = _digest(key)
        if self.database is not None:
            return _seed_in_database(self.database, digest, [_digest(k) for k in legacy_keys])
        data = self._read()
        if digest not in data:
            legacy = next((data[d] for d in map(_digest, legacy_keys) if d in data), None)
            # small: the pipeline derives seeds from it
            data[digest] = dict(legacy) if legacy else {"seed": secrets.randbits(31), "created": time.time()}
            write_json(self.path, {_SCHEMA_KEY: SCHEMA_VERSION, **data})
        return integer(data[digest], "seed")

    def _read(self) -> dict[str, JSONDict]:
        """The run plans in the file (its schema entry checked and left out); {} without a file."""
        try:
            loaded = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ValueError(f"state file {str(self.path)!r} is unreadable ({exc}); move it away to start "
                             "afresh") from None
        if isinstance(loaded, dict) and _SCHEMA_KEY in loaded:
            check_schema("state file", self.path, loaded.pop(_SCHEMA_KEY), SCHEMA_VERSION)
        if not isinstance(loaded, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("seed"), int) and not isinstance(v.get("seed"), bool)
            for v in loaded.values()
        ):
            # never overwritten: the plan seeds in it decide which queries a resumed run re-sends
            raise ValueError(
                f"state file {str(self.path)!r} is not a map of run plans (it holds JSON "
                f"{type(loaded).__name__}); it was not overwritten: move it away to start afresh"
            )
        return loaded


def _seed_in_database(url: str, digest: str, legacy: list[str]) -> int:
    """The seed of ``digest`` in the database's ``plans`` table, made once (the first host's; later ones read it).
    The table is the query journal's (:meth:`~ldpclient.teachers.journal.Journal.plan_seed`): opening the journal
    checks its schema version, so a state written by a newer ldpclient is refused here too."""
    from ..teachers.journal import Journal

    with Journal(url) as journal:
        return journal.plan_seed(digest, legacy, secrets.randbits(31))


def _digest(key: Document) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]
