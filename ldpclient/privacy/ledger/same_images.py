"""The same image under other files: what a ledger knows of the images its sources show.

A folder's record is charged to its source, the file it was decoded from (its bytes' SHA-256, keyed): a file
renamed or copied is the same source. A file re-encoded without loss (another format or compression, metadata
stripped) is another file of the same image. So the ledger keeps, per image content
(:func:`~ldpclient.io.decoding.content_id`, keyed like a source id), the source first seen showing it
(``contents``), and for every other source showing the same content, the source its spend is summed under
(``aliases``). A run tells the ledger what its images show before anything is checked or charged
(:func:`register`); from then on every spend of an aliased source is summed under the first (:func:`resolve`). What
an aliased source had spent before its alias was known joins the first source's spend: both releases were of one
image. An image edited in place shows another content: a new record, and its old spend stays on the books.

Units: spend as in :mod:`.spend` (epsilon per record in nats, delta a probability). Tables: ``contents
(content_key, source_key)`` and ``aliases (source_key, canonical_key)``, keys of 32 bytes.
"""

from __future__ import annotations

from typing import Sequence

from ...state.database import Database
from .schema import chunks, placeholders
from .spend import lock_sources


def register(c: Database, sources: Sequence[bytes], contents: Sequence[bytes]) -> int:
    """Inside the caller's transaction: record that source key ``sources[i]`` shows content key ``contents[i]``.
    A source showing content first seen under another source becomes that source's alias, its spend moved onto
    it. Returns the sources aliased now."""
    aliased = set(resolve_map(c, list(sources)))
    first = _first_sources(c, list(contents))
    lock_sources(c, [*sources, *first.values()])  # PostgreSQL: no release charges these meanwhile
    moved = 0
    for source, content in zip(sources, contents, strict=True):
        if source in aliased:
            continue
        canonical = first.get(content)
        if canonical is None:
            c.execute("INSERT INTO contents(content_key, source_key) VALUES (?, ?) ON CONFLICT(content_key) DO "
                      "NOTHING", (content, source))
            first[content] = source
            continue
        if canonical == source:
            continue
        _merge_spend(c, source, canonical)
        c.execute("INSERT INTO aliases(source_key, canonical_key) VALUES (?, ?) ON CONFLICT(source_key) DO NOTHING",
                  (source, canonical))
        aliased.add(source)
        moved += 1
    return moved


def resolve(c: Database, source_keys: Sequence[bytes]) -> list[bytes]:
    """Each source key as its spend is summed: the first source of its image where it is an alias, else itself."""
    found = resolve_map(c, list(source_keys))
    return [found.get(k, k) for k in source_keys]


def resolve_map(c: Database, source_keys: list[bytes]) -> dict[bytes, bytes]:
    """The aliased ones of ``source_keys``, each with the source its spend is summed under."""
    return _lookup(c, "aliases", "source_key", "canonical_key", source_keys)


def _first_sources(c: Database, content_keys: list[bytes]) -> dict[bytes, bytes]:
    """The known ones of ``content_keys``, each with the source first seen showing it."""
    return _lookup(c, "contents", "content_key", "source_key", content_keys)


def _lookup(c: Database, table: str, key: str, value: str, keys: list[bytes]) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for chunk in chunks(list(dict.fromkeys(keys))):
        for k, v in c.execute(f"SELECT {key}, {value} FROM {table} WHERE {key} IN ({placeholders(len(chunk))})",
                              chunk):
            out[bytes(k)] = bytes(v)
    return out


def _merge_spend(c: Database, source: bytes, canonical: bytes) -> None:
    """Add what ``source`` spent to ``canonical``'s spend, and clear ``source``'s (it is now summed there)."""
    row = c.execute("SELECT epsilon, delta, releases FROM spend WHERE source_key = ?", (source,)).fetchone()
    if row is None or (float(row[0]) == 0.0 and float(row[1]) == 0.0 and int(row[2]) == 0):
        return
    c.execute("INSERT INTO spend(source_key, epsilon, delta, releases) VALUES (?, ?, ?, ?) ON CONFLICT(source_key) "
              "DO UPDATE SET epsilon = spend.epsilon + excluded.epsilon, delta = spend.delta + excluded.delta, "
              "releases = spend.releases + excluded.releases", (canonical, float(row[0]), float(row[1]), int(row[2])))
    c.execute("DELETE FROM spend WHERE source_key = ?", (source,))
