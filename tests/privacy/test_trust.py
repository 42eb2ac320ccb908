"""Trust-adaptive budget (TADP) policy."""

from __future__ import annotations

import math

import pytest

from ldpclient.privacy.trust import TrustPolicy


def test_linear_map_endpoints_and_midpoint() -> None:
    p = TrustPolicy(eps_max=8.0, eps_min=2.0)
    assert p.epsilon_for(0) == 8.0
    assert p.epsilon_for(1) == 2.0
    assert p.epsilon_for(0.25) == pytest.approx(6.5)
    # monotone: less trusted (larger T) never gets a larger epsilon
    eps = [p.epsilon_for(t / 100) for t in range(101)]
    assert all(a >= b for a, b in zip(eps, eps[1:], strict=False))


def test_equal_bounds_give_a_constant() -> None:
    p = TrustPolicy(3.0, 3.0)
    assert {p.epsilon_for(t) for t in (0.0, 0.3, 1.0)} == {3.0}


def test_for_teachers_and_total() -> None:
    p = TrustPolicy(eps_max=4.0, eps_min=1.0)
    eps = p.for_teachers({"teacherA": 0.2, "teacherB": 1.0, "teacherC": 0})
    assert eps == pytest.approx({"teacherA": 3.4, "teacherB": 1.0, "teacherC": 4.0})
    assert p.total_epsilon({"teacherA": 0.2, "teacherB": 1.0}) == pytest.approx(4.4)
    assert p.for_teachers({}) == {} and p.total_epsilon({}) == 0.0


@pytest.mark.parametrize(
    "eps_max, eps_min, match",
    [
        (1.0, 0.0, "eps_min must be > 0"),
        (1.0, -1.0, "eps_min must be > 0"),
        (1.0, 2.0, r"eps_min \(2.0\) must be <= eps_max \(1.0\)"),
        (math.inf, 1.0, "eps_max must be finite"),
        (1.0, math.nan, "eps_min must be finite"),
        ("a", 1.0, "eps_max must be a real number"),
    ],
)
def test_policy_validation(eps_max: object, eps_min: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TrustPolicy(eps_max, eps_min)  # type: ignore[arg-type]


@pytest.mark.parametrize("t", [-0.01, 1.01, math.nan, math.inf])
def test_score_validation(t: float) -> None:
    with pytest.raises(ValueError, match="inverse trust score T"):
        TrustPolicy(2.0, 1.0).epsilon_for(t)


def test_for_teachers_names_the_bad_teacher() -> None:
    p = TrustPolicy(2.0, 1.0)
    with pytest.raises(ValueError, match=r"teacher 'evil': inverse trust score T must be in \[0, 1\]"):
        p.for_teachers({"good": 0.5, "evil": 3})
    with pytest.raises(ValueError, match="non-empty strings"):
        p.for_teachers({"": 0.5})
    with pytest.raises(ValueError, match="mapping"):
        p.for_teachers([("a", 0.5)])  # type: ignore[arg-type]


def test_policy_with_ledger_scopes_costs_both_teachers(tmp_path) -> None:
    """TADP end to end: one mechanism per teacher at its epsilon, one ledger scope per teacher."""
    from ldpclient.privacy.ledger import BudgetExceeded, Ledger
    from support.ledger_support import images, make_mechanism

    p = TrustPolicy(eps_max=2.0, eps_min=0.5)
    scores = {"trusted": 0.0, "untrusted": 1.0}
    x = images(3, seed=0)
    with Ledger(tmp_path / "l.sqlite", cap_epsilon=p.total_epsilon(scores)) as led:
        for name, eps in p.for_teachers(scores).items():
            led.release(make_mechanism(eps), x, scope=name)
        assert led.spent(x).epsilon.tolist() == pytest.approx([2.5] * 3)
        with pytest.raises(BudgetExceeded):
            led.release(make_mechanism(p.epsilon_for(0.5)), x, scope="third")
