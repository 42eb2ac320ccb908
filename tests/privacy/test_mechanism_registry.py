"""The mechanism registry: one new file in ``ldpclient/privacy/mechanisms/`` adds a mechanism everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpclient.privacy.mechanisms import make_mechanism, register_mechanism
from ldpclient.privacy.mechanisms.laplace import LaplaceMechanism
from support.package_copy import probe_with_added_file

TOY_MODULE = '''"""A toy mechanism: Laplace under another name, registered from its own file."""

from .laplace import LaplaceMechanism
from .registry import register_mechanism


@register_mechanism("toy-laplace")
class ToyLaplace(LaplaceMechanism):
    name = "toy-laplace"


@register_mechanism("toy-gaussian")
def toy_gaussian(epsilon: float, delta: float = 1e-6, **options):
    from .gaussian import GaussianMechanism

    return GaussianMechanism(epsilon, delta, **options)
'''

PROBE = """
import json
from typer.testing import CliRunner
from ldpclient.cli.options import Mechanism
from ldpclient.cli.commands import app
from ldpclient.privacy import make_mechanism
from ldpclient.privacy.mechanisms import delta_mechanism_names, mechanism_names
from ldpclient.run.mechanism import mechanism_for
m = mechanism_for("toy-laplace", epsilon=2.0, per="record", delta=None, reduce=None, value_range=(0.0, 1.0),
                  record_shape=(1, 4, 4))
g = mechanism_for("toy-gaussian", epsilon=2.0, per="record", delta=1e-7, reduce=2, value_range=(0.0, 1.0),
                  record_shape=(1, 4, 4)).guarantee((1, 4, 4))
help_text = CliRunner().invoke(app, ["label", "--help"], terminal_width=400).output
print(json.dumps({
    "names": list(mechanism_names()),
    "delta": list(delta_mechanism_names()),
    "cli": [c.value for c in Mechanism],
    "built": m.name,
    "epsilon_record": m.guarantee((1, 4, 4)).epsilon_record,
    "in_help": "toy-gaussian" in help_text,
    "gaussian_delta": g.delta_record,
    "direct": make_mechanism("toy_laplace", epsilon=1.0, per="element").name,
}))
"""


def test_a_mechanism_in_a_new_file_reaches_the_cli_the_factories_and_the_checks(tmp_path: Path):
    seen = probe_with_added_file(tmp_path, "privacy/mechanisms/toy.py", TOY_MODULE, PROBE)
    assert seen["names"][:7] == ["laplace", "gaussian", "tldp-laplace", "tldp-gaussian", "tldp-weighted",
                                 "discrete-tldp", "quantised-rr"]
    assert set(seen["names"][7:]) == {"toy-laplace", "toy-gaussian"}
    assert seen["cli"] == seen["names"] and seen["in_help"]
    assert "toy-gaussian" in seen["delta"] and "toy-laplace" not in seen["delta"]  # read from the signature
    assert seen["built"] == "toy-laplace" and seen["epsilon_record"] == pytest.approx(2.0)
    assert seen["gaussian_delta"] == pytest.approx(1e-7) and seen["direct"] == "toy-laplace"


def test_a_name_claimed_twice_or_badly_spelt_is_refused():
    with pytest.raises(ValueError, match="registered twice"):
        register_mechanism("laplace")(type("Other", (LaplaceMechanism,), {}))
    register_mechanism("laplace", rank=10)(LaplaceMechanism)  # the same factory again is harmless
    for bad in ("Laplace", "my_mech", "", "a b"):
        with pytest.raises(ValueError, match="lower case with dashes"):
            register_mechanism(bad)


def test_make_mechanism_names_every_choice_on_an_unknown_name():
    with pytest.raises(ValueError, match="choose one of laplace, gaussian, tldp-laplace"):
        make_mechanism("laplacian", epsilon=1.0, per="element")
