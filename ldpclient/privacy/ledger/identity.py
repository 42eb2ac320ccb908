"""Who a record is to the ledger: the per-ledger secret and the keyed identities made with it.

A record has two identities, both ``HMAC-SHA256(secret, domain tag + bytes)``:

* its **tensor** key: the exact values released (dtype, shape, little-endian bytes);
* its **source** key: what its spend is summed under; a caller-given id (a file's
  SHA-256), or else the record at a canonical dtype and 0..255 value scale over the
  mechanism's declared domain.

The 32-byte secret lives beside the database (``<path>.key``, mode 0600), written once,
atomically, and only once the ledger holding its check is committed (:func:`commit_new_key`);
:func:`load_or_create_key` refuses the combinations that would forget spend (a key without its ledger, a ledger
without its key). Processes opening one SQLite ledger at once
take its key and its schema in turn (:func:`first_steps_lock`), so none of them sees the key
another has just made before that one's ledger exists.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import torch

from ...io.output import atomic_write_bytes, fsync_folder
from ..guarantee import Domain
from .errors import LedgerError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: first opens are not serialised
    fcntl = None  # type: ignore[assignment]

KEY_BYTES = 32
_KEY_CHECK_MESSAGE = b"ldpclient-ledger-key-check-v1"
_RECORD_DOMAIN = b"ldpclient-record-v1\x00"
_SOURCE_ID_DOMAIN = b"ldpclient-source-id-v1\x00"
_CONTENT_ID_DOMAIN = b"ldpclient-content-id-v1\x00"
_CANONICAL_DOMAIN = b"ldpclient-source-canonical-v1\x00"
#: Steps of the canonical value scale over a declared domain (8-bit images keep every value).
_CANONICAL_LEVELS = 255


@dataclass(frozen=True)
class LedgerKey:
    """A ledger's secret and the identities it keys (each 32 bytes)."""

    secret: bytes

    def check(self) -> str:
        """Hex HMAC of a fixed message: stored in the database to tell its own key from another."""
        return hmac.new(self.secret, _KEY_CHECK_MESSAGE, hashlib.sha256).hexdigest()

    def record_keys(self, records: torch.Tensor) -> list[bytes]:
        """Tensor key of each record of ``(N, *record_shape)``: domain tag, dtype, shape and bytes."""
        header = (
            _RECORD_DOMAIN
            + dtype_name(records.dtype).encode()
            + b"\x00"
            + json.dumps(list(records.shape[1:])).encode()
            + b"\x00"
        )
        return [hmac.digest(self.secret, header + row, "sha256") for row in _row_bytes(records)]

    def canonical_source_keys(self, records: torch.Tensor, domain: Domain) -> list[bytes]:
        """Source key of each record without a caller's id: its values mapped by ``domain`` onto
        ``0..255`` steps and rounded, with its shape (dtype and declared range drop out)."""
        unit = (records.detach().cpu().to(torch.float64).nan_to_num(0.0) - domain.low) / domain.width
        levels = (unit.clamp(0.0, 1.0) * _CANONICAL_LEVELS).round().to(torch.uint8)
        header = _CANONICAL_DOMAIN + json.dumps(list(records.shape[1:])).encode() + b"\x00"
        return [hmac.digest(self.secret, header + row, "sha256") for row in _row_bytes(levels)]

    def source_id_keys(self, sources: Sequence[bytes | str]) -> list[bytes]:
        """Source key of each caller-given source id (non-empty bytes, or str as UTF-8)."""
        out = []
        for sid in sources:
            if isinstance(sid, str):
                sid = sid.encode("utf-8", "surrogateescape")
            if not isinstance(sid, (bytes, bytearray)) or not sid:
                raise TypeError(f"each source id must be non-empty bytes or str, got {type(sid).__name__}")
            out.append(hmac.digest(self.secret, _SOURCE_ID_DOMAIN + bytes(sid), "sha256"))
        return out


    def content_keys(self, contents: Sequence[bytes]) -> list[bytes]:
        """Key of each image content id (:func:`~ldpclient.io.decoding.content_id`, 32 bytes)."""
        return [hmac.digest(self.secret, _CONTENT_ID_DOMAIN + bytes(c), "sha256") for c in contents]


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"`` (how the store names a dtype)."""
    return str(dtype).removeprefix("torch.")


def rows_as_bytes(t: torch.Tensor) -> list[bytes]:
    """The bytes of each row of a contiguous ``(N, ...)`` tensor, native dtype, C order: one copy, then sliced."""
    u8 = t.contiguous().reshape(t.shape[0], -1).view(torch.uint8).numpy()  # a byte view: every dtype, bfloat16 included
    buf, step = u8.tobytes(), u8.shape[1]
    return [buf[i : i + step] for i in range(0, len(buf), step)]


def _row_bytes(t: torch.Tensor) -> list[bytes]:
    """Canonical bytes of each row of ``(N, ...)``: contiguous, native dtype, little-endian.

    Floating ``-0.0`` is normalised to ``+0.0`` (the same value to every mechanism).
    """
    t = t.detach().cpu()
    if t.is_floating_point():
        t = t + 0.0  # -0.0 + 0.0 == +0.0; keeps dtype
    t = t.contiguous().reshape(t.shape[0], -1)
    if t.element_size() > 1 and sys.byteorder != "little":  # pragma: no cover - big-endian hosts
        raw = t.numpy().byteswap()
        return [r.tobytes() for r in raw]
    return rows_as_bytes(t)


# ------------------------------------------------------------------ the key file


def database_exists(path: Path) -> bool:
    """Whether the ledger file at ``path`` holds anything (it may live only in its WAL file until a checkpoint)."""
    return any(p.exists() and p.stat().st_size > 0 for p in (path, Path(str(path) + "-wal")))


def pending_key_path(key_path: Path) -> Path:
    """Where a key made for a new ledger waits (``<key file>.new``) until that ledger is committed."""
    return key_path.with_name(key_path.name + ".new")


def load_or_create_key(
    path: str | Path, key_path: Path, ledger_exists: bool, *, start_with_key: bool = False
) -> tuple[LedgerKey, bool, bool]:
    """The ledger's key, whether it is pending, and whether a new ledger starts with it.

    A key made for a new ledger is written as :func:`pending_key_path` and becomes the key file only once the ledger
    that holds its check is committed (:func:`commit_new_key`): a key file always has its ledger, whatever moment a
    first open dies at (a full disk, a kill), and the next open starts the ledger afresh instead of refusing a key
    without one. A pending key left by an open that died after its ledger committed is taken up (the ledger's key
    check decides). With ``start_with_key`` a key file that exists before its ledger (one provisioned for it, e.g.
    by a secrets manager) starts it; without, such a key file is refused: it may be the key of a ledger that was
    lost, whose spend a fresh start would forget."""
    pending = pending_key_path(key_path)
    if key_path.exists():
        if not ledger_exists and not start_with_key:
            raise LedgerError(
                f"ledger {path} is missing or empty but its key file {key_path} exists: restore the ledger (a fresh "
                "start would forget the spend recorded with this key); if the key was made for a new ledger "
                "(provisioned, never used), start the ledger with it once: ldpclient budget --init (the same "
                "--state, --state-dir and --ledger-key-file)"
            )
        return read_key(key_path), False, not ledger_exists
    if ledger_exists:
        if pending.exists():  # its first open died between the ledger's commit and the key file's
            return read_key(pending), True, False
        raise LedgerError(
            f"ledger key file {key_path} is missing but the ledger {path} exists: without its "
            "key the ledger cannot recognise its records (every release would be charged "
            "again). Restore the key file (for a shared ledger: copy it from a host that uses it), or "
            "start a new ledger elsewhere."
        )
    key_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write_bytes(pending, secrets.token_bytes(KEY_BYTES))  # 0600, as its temporary file is made
    return read_key(pending), True, True


def commit_new_key(key_path: Path) -> None:
    """Once the ledger holding its check is committed: the pending key becomes the key file (a hard link, which
    never replaces a key file that exists), made durable."""
    pending = pending_key_path(key_path)
    try:
        os.link(pending, key_path)
    except FileExistsError:
        pass  # another process opening the same new ledger made it first: the same key
    except FileNotFoundError:
        if not key_path.exists():
            raise
        return  # another process took the same pending key up first
    fsync_folder(key_path.parent)
    pending.unlink(missing_ok=True)


def forget_new_key(key_path: Path) -> None:
    """After a first open that failed before its ledger was committed: remove the pending key (nothing was ever
    charged under it)."""
    try:
        pending_key_path(key_path).unlink(missing_ok=True)
    except OSError:
        pass


def read_key(key_path: Path) -> LedgerKey:
    """The key in ``key_path``; :class:`LedgerError` when it cannot be read or is not a key."""
    try:
        data = key_path.read_bytes()
    except OSError as exc:
        raise LedgerError(f"cannot read ledger key file {key_path}: {exc.strerror or exc}") from exc
    if len(data) != KEY_BYTES:
        raise LedgerError(f"ledger key file {key_path} is corrupt: expected {KEY_BYTES} bytes, found {len(data)}")
    return LedgerKey(data)


@contextmanager
def first_steps_lock(path: Path) -> Iterator[None]:
    """Hold the first steps of opening the SQLite ledger at ``path`` (its key, then its schema) against other
    processes doing the same: an exclusive ``flock`` on the ledger's folder, held for those steps only (no file is
    made for it). Without it, six processes opening a new ledger at once failed in 4 trials of 10: one made the key,
    another saw that key before the ledger existed and refused it as a key without its ledger. Not POSIX, or a
    folder that cannot be opened: no lock (SQLite then reports what it finds)."""
    try:
        fd = os.open(path.parent, os.O_RDONLY) if fcntl is not None else -1
    except OSError:
        fd = -1
    try:
        if fd >= 0:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        if fd >= 0:
            os.close(fd)  # closing the descriptor releases the lock
