"""TOML configuration files for the command line (``--config FILE``).

A config file supplies option values for a command; options given on the command
line (or through their environment variable) win over the file, and the file wins
over the built-in defaults. Keys are option names with ``-`` or ``_``
(``batch-size`` = ``batch_size``). Top-level keys apply to every command that has
such an option; a table named after the command (``[label]``, ``[noise]``) applies
to that command only and overrides the top level::

    teacher = "http://127.0.0.1:8080/v2/models/digits"
    [label]
    mechanism = "laplace"
    epsilon = 2.0
    money-cap = 5.0

A key that no command has is refused, with the nearest known name (a misspelt
``privacy-caps`` is not silently a run without a cap). Secrets (``token``,
``api-key``, ``password`` ..., and a password or token inside a URL such as a
``state`` or ``teacher`` address) are refused: they come only from options or
environment variables, so a config file can be shared or committed without leaking
them. Options that change what is kept rather than what a run does
(:data:`COMMAND_LINE_ONLY`, e.g. ``budget --set-cap``) are taken from the command
line only. Reading TOML needs Python 3.11+ (``tomllib``) or the ``tomli`` package
on Python 3.10.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Iterable, Mapping
from urllib.parse import parse_qsl, urlsplit

SECRET_KEYS = frozenset({"token", "api_key", "apikey", "password", "secret", "authorization", "bearer"})
#: Options a config file may not give: each changes what the state keeps (``budget --set-cap`` raises or lowers
#: the ledger's cap, ``budget --init`` starts a ledger with a key it finds), which a file that only configures runs
#: must not do unseen.
COMMAND_LINE_ONLY = frozenset({"set_cap", "init"})
#: Query parameters of a URL that carry a secret (``postgresql://h/db?password=...``).
_SECRET_PARAMETERS = frozenset({"password", "passwd", "pass", "token", "access_token", "api_key", "apikey", "key",
                                "secret", "sslpassword"})


class ConfigError(ValueError):
    """A config file problem; the message is one line and names the file (and key)."""


def _toml_loads(text: str) -> dict[str, object]:
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10 only
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise ConfigError(
                "reading a --config file needs Python 3.11+ or the 'tomli' package (pip install tomli)"
            ) from None
    return tomllib.loads(text)


def _norm(key: str) -> str:
    return key.strip().replace("-", "_").lower()


def read_config(path: str | os.PathLike[str]) -> dict[str, object]:
    """Parse a TOML config file. Raises :class:`ConfigError` naming the file on any problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {str(p)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {str(p)!r}: {exc}") from None
    try:
        return _toml_loads(text)
    except ConfigError:
        raise
    except Exception as exc:  # tomllib.TOMLDecodeError (a ValueError) with line/column
        raise ConfigError(f"config file {str(p)!r} is not valid TOML: {exc}") from None


def options_for_command(
    config: Mapping[str, object],
    command: str,
    allowed: Iterable[str],
    *,
    source: str = "config",
    commands: Iterable[str] = (),
    known: Iterable[str] = (),
) -> dict[str, object]:
    """Option values for ``command`` from a parsed config (normalised to ``snake_case`` names).

    ``allowed``: the command's option names. ``commands``: names of all commands, whose tables are skipped when
    they are not ``command``'s own. ``known``: the option names of every command: a top-level key that another
    command has is left to it; one that no command has is refused. Unknown tables, unknown keys, secret keys or
    values anywhere and :data:`COMMAND_LINE_ONLY` options raise :class:`ConfigError` (one line, with the nearest
    known name for a misspelt key).
    """
    allowed_set = {_norm(a) for a in allowed}
    known_set = allowed_set | {_norm(a) for a in known}
    command_tables = {_norm(c) for c in commands} | {_norm(command)}
    top: dict[str, object] = {}
    table: dict[str, object] = {}
    for key, value in config.items():
        k = _norm(key)
        if isinstance(value, Mapping):
            if k not in command_tables:
                raise ConfigError(f"{source}: unknown table [{key}] (tables are named after commands"
                                  f"{_nearest(k, command_tables)})")
            for sub_key, sub_value in value.items():
                sk = _norm(sub_key)
                shown = f"[{key}] {sub_key}"
                _check_value(sk, sub_value, source, shown)
                if k != _norm(command):
                    continue
                if sk not in allowed_set:
                    raise ConfigError(f"{source}: unknown option {sub_key!r} in [{key}]{_nearest(sk, allowed_set)}")
                _check_code(sk, sub_value, source)
                table[sk] = sub_value
            continue
        _check_value(k, value, source, key)
        if k not in known_set:
            raise ConfigError(f"{source}: unknown option {key!r}{_nearest(k, known_set)}")
        if k in allowed_set:
            _check_code(k, value, source)
            top[k] = value
    return {**top, **table}


def _nearest(key: str, names: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name nearest ``key``, else ``""``."""
    close = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.6)
    return f" (did you mean {close[0].replace('_', '-')!r}?)" if close else ""


def _check_value(key: str, value: object, source: str, shown: str) -> None:
    """ConfigError for a secret (its key, or a URL holding one) or a :data:`COMMAND_LINE_ONLY` option."""
    _check_secret(key, source, shown)
    if key in COMMAND_LINE_ONLY:
        raise ConfigError(f"{source}: {shown!r} changes what the state keeps; it is taken from the command line "
                          f"only (--{key.replace('_', '-')})")
    if isinstance(value, str) and _url_secret(value):
        raise ConfigError(f"{source}: {shown!r} holds a URL with a password or token in it; secrets are never read "
                          "from config files (give the URL without it, and the secret through its option or "
                          "environment variable, e.g. PGPASSWORD or LDPCLIENT_TOKEN)")


def _url_secret(value: str) -> bool:
    """Whether ``value`` is a URL with a password in its user part or a secret among its query parameters."""
    if "://" not in value:
        return False
    try:
        parts = urlsplit(value.strip())
        password = parts.password
    except ValueError:  # a malformed port or netloc: not a URL this file may carry either way
        return "@" in value
    return password is not None or any(_norm(name) in _SECRET_PARAMETERS
                                       for name, _ in parse_qsl(parts.query, keep_blank_values=True))


def _check_code(key: str, value: object, source: str) -> None:
    """A ``local:`` teacher imports and runs Python code: a config file (which may come from anywhere) may
    not name one; the user names it on the command line, where it is seen."""
    if key == "teacher" and isinstance(value, str) and value.strip().lower().startswith("local:"):
        raise ConfigError(
            f"{source}: teacher {value!r} would import and run Python code; a local: teacher is only accepted "
            "on the command line (--teacher), never from a config file"
        )


def _check_secret(key: str, source: str, shown: str) -> None:
    if key in SECRET_KEYS or key.endswith("_token") or key.endswith("_password"):
        raise ConfigError(
            f"{source}: {shown!r} looks like a secret; secrets are never read from config files "
            "(use --token or the LDPCLIENT_TOKEN environment variable)"
        )
