"""How a ledger is opened: on a first open its key and its schema are made, on every later one checked; or, to be
read only, opened without writing anything.

The key file of a new ledger appears only once the ledger holding its check is committed
(:func:`~.identity.commit_new_key`), so a first open that dies at any moment (a full disk, a kill) leaves nothing
that blocks the next: a pending key and the files it made are removed by a first open that fails, and replaced by
the next one after a kill. One process of those opening a new ledger at once makes it (SQLite: the folder's lock,
:func:`~.identity.first_steps_lock`; PostgreSQL: the schema's advisory lock).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ...state.database import LEDGER_NAMESPACE, Database
from .errors import LedgerError
from .identity import (
    LedgerKey,
    commit_new_key,
    database_exists,
    first_steps_lock,
    forget_new_key,
    load_or_create_key,
    read_key,
)
from .schema import SCHEMA_LOCK, check_to_read, connect, init_database, init_schema, stored_schema, transaction


def open_ledger(url: str | None, path: Path | None, location: str, key_path: Path, *,
                start_with_key: bool) -> tuple[Database, LedgerKey]:
    """The ledger in the PostgreSQL database ``url`` or the SQLite file ``path`` (``location``: either, as printed),
    with its key from ``key_path``: made on a first open, checked on later ones."""
    made = path is not None and not path.exists()
    opened: list[Database] = []
    pending = [False]
    try:
        if path is None:
            return _open_in_database(str(url), location, key_path, start_with_key, opened, pending)
        return _open_file(path, location, key_path, start_with_key, opened, pending)
    except BaseException:
        for conn in opened:
            conn.close()
        _forget(path, key_path, pending=pending[0], made=made)
        raise


def _open_in_database(url: str, location: str, key_path: Path, start_with_key: bool, opened: list[Database],
                      pending: list[bool]) -> tuple[Database, LedgerKey]:
    """The database first: whether it holds a ledger decides about the key."""
    conn = connect(url)
    opened.append(conn)
    with transaction(conn):  # processes opening a new ledger at once: one makes it, under the lock
        conn.lock(SCHEMA_LOCK)
        key = _key_and_schema(conn, location, location, key_path, start_with_key, pending, init_schema)
    if pending[0]:
        commit_new_key(key_path)
    return conn, key


def _open_file(path: Path, location: str, key_path: Path, start_with_key: bool, opened: list[Database],
               pending: list[bool]) -> tuple[Database, LedgerKey]:
    with first_steps_lock(path):  # others opening it wait for the key and the schema
        conn = connect(path)
        opened.append(conn)
        tables = conn.tables()
        if tables and "meta" not in tables:
            raise LedgerError(f"{location} is not an ldpclient ledger (it holds other tables: "
                              f"{', '.join(sorted(tables)[:3])}); restore the ledger or use another state")
        key = _key_and_schema(conn, path, location, key_path, start_with_key, pending, init_database)
        if pending[0]:
            commit_new_key(key_path)
    return conn, key


def _key_and_schema(conn: Database, where: str | Path, location: str, key_path: Path, start_with_key: bool,
                    pending: list[bool], init: Callable[..., None]) -> LedgerKey:
    """The ledger's key (made pending for a new ledger: ``pending[0]``), then its schema made or checked by ``init``
    (:func:`~.schema.init_schema` in the caller's transaction, or :func:`~.schema.init_database` for a file)."""
    key, pending[0], starts = load_or_create_key(where, key_path, stored_schema(conn) is not None,
                                                 start_with_key=start_with_key)
    init(conn, path=location, key_path=key_path, key_check=key.check(), key_created=starts)
    return key


def _forget(path: Path | None, key_path: Path, *, pending: bool, made: bool) -> None:
    """After a failed open: where it failed before a new ledger was committed, remove the pending key and the files
    this open made (nothing was ever charged in them); else only an empty file it made."""
    if pending:
        forget_new_key(key_path)
    elif path is None or database_exists(path):
        return
    if path is not None and made:
        for file in (path, Path(str(path) + "-wal"), Path(str(path) + "-shm")):
            try:
                file.unlink(missing_ok=True)
            except OSError:
                pass


def open_to_read(path: Path, location: str, key_path: Path) -> tuple[Database, LedgerKey]:
    """The ledger file ``path`` opened read-only (nothing made, migrated or recorded), checked against its key."""
    conn = Database.open_to_read(path, namespace=LEDGER_NAMESPACE)
    try:
        if not key_path.exists():
            raise LedgerError(f"ledger key file {key_path} is missing: the ledger {path} cannot be read without it. "
                              "Restore the key file.")
        key = read_key(key_path)
        check_to_read(conn, path=location, key_path=key_path, key_check=key.check())
    except BaseException:
        conn.close()
        raise
    return conn, key
