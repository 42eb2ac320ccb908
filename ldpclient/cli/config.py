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

Secrets (``token``, ``api-key``, ``password`` ...) are refused: they come only from
options or environment variables, so a config file can be shared or committed
without leaking them. Reading TOML needs Python 3.11+ (``tomllib``) or the
``tomli`` package on Python 3.10.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping

SECRET_KEYS = frozenset({"token", "api_key", "apikey", "password", "secret", "authorization", "bearer"})


class ConfigError(ValueError):
    """A config file problem; the message is one line and names the file (and key)."""


def _toml_loads(text: str) -> dict[str, Any]:
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


def read_config(path: str | os.PathLike[str]) -> dict[str, Any]:
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
    config: Mapping[str, Any],
    command: str,
    allowed: Iterable[str],
    *,
    source: str = "config",
    commands: Iterable[str] = (),
) -> dict[str, Any]:
    """Option values for ``command`` from a parsed config (normalised to ``snake_case`` names).

    ``allowed``: the command's option names. ``commands``: names of all commands,
    whose tables are skipped when they are not ``command``'s own. Top-level keys that
    ``command`` has no option for are ignored (they may be meant for another
    command); keys inside ``[command]`` must be options of it. Unknown tables,
    unknown keys in the command's table and secret keys anywhere raise
    :class:`ConfigError`.
    """
    allowed_set = {_norm(a) for a in allowed}
    command_tables = {_norm(c) for c in commands} | {_norm(command)}
    top: dict[str, Any] = {}
    table: dict[str, Any] = {}
    for key, value in config.items():
        k = _norm(key)
        if isinstance(value, Mapping):
            if k == _norm(command):
                for sub_key, sub_value in value.items():
                    sk = _norm(sub_key)
                    _check_secret(sk, source, f"[{key}] {sub_key}")
                    if sk not in allowed_set:
                        raise ConfigError(
                            f"{source}: unknown option {sub_key!r} in [{key}] "
                            f"(known: {', '.join(sorted(a.replace('_', '-') for a in allowed_set))})"
                        )
                    _check_code(sk, sub_value, source)
                    table[sk] = sub_value
            elif k not in command_tables:
                raise ConfigError(f"{source}: unknown table [{key}] (tables are named after commands)")
            else:
                for sub_key in value:
                    _check_secret(_norm(sub_key), source, f"[{key}] {sub_key}")
            continue
        _check_secret(k, source, key)
        if k in allowed_set:
            _check_code(k, value, source)
            top[k] = value
    return {**top, **table}


def _check_code(key: str, value: Any, source: str) -> None:
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
