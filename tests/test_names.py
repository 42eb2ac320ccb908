"""One list of names per concept (ldpclient.names): the implementations, the CLI and the audit agree with it."""

from __future__ import annotations

import inspect

import typer
from typer.testing import CliRunner

from ldpclient import names
from ldpclient.cli.commands import app
from ldpclient.cli.options import Augment, Basis, EpsilonUnit, Mechanism
from ldpclient.privacy import MECHANISMS as FACTORIES
from ldpclient.privacy import defaults as privacy_defaults
from ldpclient.privacy.mechanisms import basis_mechanism_names, delta_mechanism_names, mechanism_names
from ldpclient.transfer import defaults


def test_every_mechanism_name_has_a_factory_and_delta_follows_the_signatures():
    assert tuple(FACTORIES) == mechanism_names()
    assert mechanism_names()[:2] == ("laplace", "gaussian")  # the built-ins keep their order in help texts
    with_delta = tuple(n for n, f in FACTORIES.items() if "delta" in inspect.signature(f).parameters)
    assert with_delta == delta_mechanism_names() == ("gaussian", "tldp-gaussian", "tldp-weighted")
    with_basis = tuple(n for n, f in FACTORIES.items() if "basis" in inspect.signature(f).parameters)
    assert with_basis == basis_mechanism_names() == ("laplace", "gaussian", "quantised-rr")


def test_augmentations_map_to_plan_kinds_and_the_pipeline_takes_exactly_them():
    assert tuple(names.PLAN_KINDS) == names.AUGMENTATIONS


def test_cli_choices_derive_from_the_names_and_the_defaults_are_among_them():
    assert tuple(m.value for m in Mechanism) == mechanism_names()
    assert tuple(a.value for a in Augment) == names.AUGMENTATIONS
    assert tuple(u.value for u in EpsilonUnit) == names.EPSILON_UNITS
    assert privacy_defaults.mechanism() in mechanism_names() and defaults.augment() in names.AUGMENTATIONS
    assert privacy_defaults.epsilon_unit() in names.EPSILON_UNITS
    assert tuple(b.value for b in Basis) == names.BASES
    assert privacy_defaults.basis(privacy_defaults.mechanism(), privacy_defaults.epsilon_unit(), None,
                                  privacy_defaults.epsilon()) in names.BASES


def test_audit_help_lists_every_mechanism_and_refuses_an_unknown_one(tmp_path):
    command = typer.main.get_command(app).commands["audit"]  # type: ignore[attr-defined]
    help_text = next(p.help for p in command.params if p.name == "mechanism")
    for name in mechanism_names():
        assert name in help_text
    runner = CliRunner()
    res = runner.invoke(app, ["audit", "--private", str(tmp_path), "--mechanism", "nope", "--sweep", "1"])
    assert res.exit_code == 2 and "--mechanism must be one of" in res.output


def test_choice_list_reads_as_a_sentence():
    assert names.choice_list(("a",)) == "a" and names.choice_list(("a", "b", "c")) == "a, b or c"


def test_label_and_noise_share_the_privacy_network_and_fact_options():
    """The option groups are one set of option objects: same flags, defaults and help in both commands."""
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]

    def params(name):
        return {p.name: p for p in commands[name].params}

    label, noise = params("label"), params("noise")
    shared = {"mechanism", "epsilon", "epsilon_unit", "delta", "secure", "allow_large_delta", "reduce", "postprocess",
              "basis", "coefficients", "clip_norm",
              "timeout", "max_retry_time", "ca_bundle", "wire", "num_classes", "class_names", "value_range",
              "input_shape", "input_name", "output_name", "datatype", "privacy_cap", "state_dir", "max_pixels"}
    assert shared <= set(label) and shared <= set(noise)
    for name in sorted(shared):
        a, b = label[name], noise[name]
        assert (a.opts, a.secondary_opts, a.default) == (b.opts, b.secondary_opts, b.default), name
        if name == "epsilon":  # label's help adds what --epsilon 0 means there (noise refuses 0)
            assert a.help.startswith(b.help) and "0: data-free" in a.help
        elif name != "state_dir":  # the same directory; label keeps its journal there too
            assert a.help == b.help, name


def test_the_student_zoo_builds_exactly_the_named_students_and_help_lists_them():
    from ldpclient.transfer.student import STUDENTS

    assert tuple(STUDENTS) == names.STUDENT_NAMES
    assert {defaults.student(s, p) for s in ((1, 28, 28), (3, 32, 32)) for p in (True, False)} <= set(
        names.STUDENT_NAMES
    )
    help_text = " ".join(CliRunner().invoke(app, ["label", "--help"], terminal_width=200).output.split())
    assert f"Student model: {names.choice_list(names.STUDENT_NAMES)} (default:" in help_text
