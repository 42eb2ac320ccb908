"""CLI user errors that need no teacher: one-line message, exit code, no traceback, config files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from ldpclient import __version__
from ldpclient.cli.commands import app
from ldpclient.cli.config import ConfigError, options_for_command, read_config
from ldpclient.cli.errors import EXIT_USAGE
from support.fast_children import run_cli

UNREACHABLE = "http://127.0.0.1:9/v2/models/digits"  # discard port: nothing listens, never contacted here


def _invoke(args: list[str], **kw):
    return CliRunner().invoke(app, args, **kw)


def _assert_user_error(result, code: int, *needles: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in result.output, (needle, result.output)


def _folder(tmp_path: Path, n: int = 3) -> Path:
    d = tmp_path / "private"
    d.mkdir()
    for k in range(n):
        Image.fromarray(np.full((8, 8), 20 * k, dtype=np.uint8)).save(d / f"{k}.png")
    return d


def test_version() -> None:
    result = _invoke(["version"])
    assert result.exit_code == 0 and result.stdout.strip() == __version__
    flag = _invoke(["--version"])  # the flag too, before any command
    assert flag.exit_code == 0 and flag.stdout.strip() == __version__


def test_missing_and_empty_folder(tmp_path: Path) -> None:
    result = _invoke(["label", str(tmp_path / "nope"), "--teacher", UNREACHABLE])
    _assert_user_error(result, EXIT_USAGE, "error: private folder", "does not exist")
    assert len(result.stderr.strip().splitlines()) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    result = _invoke(["label", str(empty), "--teacher", UNREACHABLE])
    _assert_user_error(result, EXIT_USAGE, "contains no image files")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--epsilon", "-1"], "--epsilon must be"),
        (["--epsilon", "nan"], "--epsilon must be"),
        (["--mechanism", "laplace", "--delta", "1e-5"], "--delta applies to gaussian"),
        (["--delta", "2"], "--delta must be in (0, 1)"),
        (["--postprocess", "sharpen"], "--postprocess"),
        (["--student", "gpt"], "--student"),
        (["--privacy-cap", "0"], "--privacy-cap"),
        (["--output", "x.csv", "--format", "xml"], "--format"),
        (["--mechanism", "nope"], "nope"),
        (["--reduce", "0"], "--reduce"),
        (["--queries", "0"], "--queries"),
        (["--timeout", "0"], "--timeout must be"),
        (["--max-retry-time", "-1"], "--max-retry-time must be"),
        (["--ca-bundle", "/nonexistent/ca.pem"], "--ca-bundle"),
    ],
)
@pytest.mark.parametrize("command", ["label", "noise"])
def test_bad_option_values(tmp_path: Path, args: list[str], needle: str, command: str) -> None:
    if command == "noise" and args[0] in ("--student", "--output", "--queries"):
        pytest.skip("a label-only option")
    folder = _folder(tmp_path)
    where = (
        ["--teacher", UNREACHABLE] if command == "label" else ["--out", str(tmp_path / "out"), "--teacher", UNREACHABLE]
    )
    result = _invoke([command, str(folder), *where, *args])
    _assert_user_error(result, EXIT_USAGE, needle)


def test_missing_teacher(tmp_path: Path) -> None:
    result = _invoke(["label", str(_folder(tmp_path))])
    _assert_user_error(result, EXIT_USAGE, "missing option --teacher")


def test_json_mode_error_is_a_json_document(tmp_path: Path) -> None:
    result = _invoke(["label", str(tmp_path / "nope"), "--teacher", UNREACHABLE, "--json"])
    assert result.exit_code == EXIT_USAGE
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["exit_code"] == EXIT_USAGE and "does not exist" in doc["error"]


def test_config_file_supplies_defaults_and_command_line_wins(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    cfg = tmp_path / "ldp.toml"
    # `out` is noise's option: a top-level key another command has is left to it
    cfg.write_text(f'teacher = "{UNREACHABLE}"\nout = "noised"\n[label]\nepsilon = -3.0\n')
    # the config's (bad) epsilon is used: proof that the file was read, including the teacher
    result = _invoke(["label", str(folder), "--config", str(cfg)])
    _assert_user_error(result, EXIT_USAGE, "--epsilon must be", "-3.0")
    # the command line wins over the file
    result = _invoke(["label", str(folder), "--config", str(cfg), "--epsilon", "2", "--reduce", "0"])
    _assert_user_error(result, EXIT_USAGE, "--reduce")


def test_config_file_problems_are_one_line_errors(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    for text, needle in [
        ('token = "abc"\n', "secrets are never read from config files"),
        ('[label]\napi-key = "abc"\n', "looks like a secret"),
        ("[label]\nepsilonn = 1\n", "unknown option 'epsilonn'"),
        ("[frobnicate]\nx = 1\n", "unknown table [frobnicate]"),
        ("epsilon = \n", "not valid TOML"),
        ("privacy-caps = 50\n", "unknown option 'privacy-caps' (did you mean 'privacy-cap'?)"),
        ("[label]\nmoneycap = 5\n", "unknown option 'moneycap' in [label] (did you mean 'money-cap'?)"),
        ("[lable]\nepsilon = 1\n", "unknown table [lable] (tables are named after commands (did you mean 'label'?))"),
        ('state = "postgresql://me:abc@127.0.0.1/ldp"\n', "holds a URL with a password or token in it"),
        ('[label]\nteacher = "https://me:abc@teacher.example/v2/models/m"\n', "URL with a password or token"),
        ('state = "postgresql://127.0.0.1/ldp?user=me&password=abc"\n', "URL with a password or token"),
        ('[noise]\nteacher = "https://teacher.example/v2/models/m?api_key=abc"\n', "URL with a password or token"),
        ("set-cap = 500\n", "taken from the command line only (--set-cap)"),
    ]:
        cfg = tmp_path / "c.toml"
        cfg.write_text(text)
        result = _invoke(["label", str(folder), "--config", str(cfg)])
        _assert_user_error(result, EXIT_USAGE, needle)
        assert "abc" not in result.output
    result = _invoke(["label", str(folder), "--config", str(tmp_path / "missing.toml")])
    _assert_user_error(result, EXIT_USAGE, "does not exist")


def test_options_for_command_unit() -> None:
    cfg = {"epsilon": 1.0, "batch-size": 8, "label": {"epsilon": 2.0}, "noise": {"size": 8}}
    got = options_for_command(cfg, "label", ["epsilon", "batch_size", "teacher"], commands=["label", "noise"])
    assert got == {"epsilon": 2.0, "batch_size": 8}
    with pytest.raises(ConfigError, match="secret"):
        options_for_command({"noise": {"my_token": "x"}}, "label", ["epsilon"], commands=["label", "noise"])


def test_read_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        read_config(tmp_path / "nope.toml")
    p = tmp_path / "bad.toml"
    p.write_text("= 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        read_config(p)


def test_budget_without_ledger_is_a_clear_error(tmp_path: Path) -> None:
    result = _invoke(["budget", "--state-dir", str(tmp_path / "state")])
    _assert_user_error(result, EXIT_USAGE, "no ledger at")


def test_noise_bad_options(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    result = _invoke(["noise", str(folder), "--out", str(tmp_path / "out"), "--channels", "2"])
    _assert_user_error(result, EXIT_USAGE, "--channels must be 1 or 3")
    (tmp_path / "afile").write_text("x")
    result = _invoke(["noise", str(folder), "--out", str(tmp_path / "afile")])
    _assert_user_error(result, EXIT_USAGE, "is not a directory")


def test_cli_pixel_limit_default_matches_data_module() -> None:
    from ldpclient.cli import options
    from ldpclient.io import folders

    assert options.DEFAULT_MAX_PIXELS == folders.DEFAULT_MAX_PIXELS


@pytest.mark.parametrize("args, needle", [
    (["label", "x", "--teacher", "http://h/m", "--epochs", "0"], "--epochs"),
    (["label", "x", "--teacher", "http://h/m", "--queries", "0"], "--queries"),
    (["label", "x", "--bogus"], "--bogus"),
    (["label"], "PRIVATE_DIR"),
    (["noise", "x", "--out", "o", "--mechanism", "nope"], "--mechanism"),
])
def test_option_errors_are_one_line_not_a_usage_box(args, needle):
    proc = run_cli(*args, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr


@pytest.mark.parametrize("config", ['teacher = "local:this:s"\n', '[label]\nteacher = " LOCAL:os:getcwd"\n'])
def test_a_config_file_may_not_name_a_local_teacher(tmp_path: Path, config: str) -> None:
    """`teacher = "local:this:s"` in a config imported `this` (it printed the Zen of Python) and then
    failed with a traceback: importing code named in a file is refused."""
    folder = _folder(tmp_path)
    cfg = tmp_path / "ldp.toml"
    cfg.write_text(config)
    proc = run_cli("label", str(folder), "--config", str(cfg), timeout=60)
    assert proc.returncode == EXIT_USAGE and "only accepted on the command line" in proc.stderr
    assert "Zen of Python" not in proc.stdout + proc.stderr and "Beautiful is better" not in proc.stdout
    assert "Traceback" not in proc.stderr


def test_a_local_teacher_that_is_not_a_teacher_is_one_line(tmp_path: Path) -> None:
    result = _invoke(["label", str(_folder(tmp_path)), "--teacher", "local:string:ascii_letters",
                      "--state-dir", str(tmp_path / "s")])
    _assert_user_error(result, EXIT_USAGE, "not a Teacher, module or factory")


@pytest.mark.parametrize("seed", ["-1", str(2**70)])
def test_a_seed_out_of_reach_is_named_before_anything_runs(tmp_path: Path, seed: str) -> None:
    """--seed -1 crashed in training after noising and paying; 2**70 overflowed unnamed."""
    result = _invoke(["label", str(_folder(tmp_path)), "--teacher", UNREACHABLE, "--state-dir",
                      str(tmp_path / "s"), "--seed", seed])
    _assert_user_error(result, EXIT_USAGE, "--seed must be an integer from 0 to 2**63-1")


def test_a_delta_below_the_secure_samplers_reach_is_named() -> None:
    """--delta 1e-300 reported 'got -1.43e-13'."""
    from ldpclient.privacy import gaussian

    with pytest.raises(ValueError, match=r"delta 1e-300 is below what the secure Gaussian sampler can guarantee"):
        gaussian(1.0, 1e-300, per="record").guarantee((1, 8, 8))


def test_a_config_file_cannot_change_the_cap_a_read_only_budget_shows(tmp_path: Path) -> None:
    for text in ("set-cap = 500\n", "[budget]\nset-cap = \"none\"\n"):
        cfg = tmp_path / "c.toml"
        cfg.write_text(text)
        result = _invoke(["budget", "--state-dir", str(tmp_path / "state"), "--config", str(cfg)])
        _assert_user_error(result, EXIT_USAGE, "changes what the state keeps", "command line only (--set-cap)")
        assert not (tmp_path / "state").exists()
