"""The interval rule's effective number of independent draws among runs that share their
model family's error (cluster-sampling design effect), worked by hand."""

from __future__ import annotations

import math

import pytest

from ridgeline.metrics.prediction_interval import effective_units, residual_interval

# Two families of three runs. By hand: grand mean 0.1; family means 0.2 and 0.0;
# MSB = 3 * 0.1^2 + 3 * 0.1^2 = 0.06 (1 df); MSW = (0.01 + 0 + 0.01) * 2 / 4 = 0.01;
# m0 = (6 - (9 + 9) / 6) / 1 = 3; rho = (0.06 - 0.01) / (0.06 + 2 * 0.01) = 0.625;
# n_eff = 6 / (1 + (3 - 1) * 0.625) = 2.6667.
VALUES = [0.1, 0.2, 0.3, -0.1, 0.0, 0.1]
GROUPS = ["a", "a", "a", "b", "b", "b"]
N_EFF = 6 / 2.25
# sd over the six runs: squared deviations 0, .01, .04, .04, .01, 0 -> sqrt(0.10 / 5)
SD = math.sqrt(0.10 / 5)


def test_effective_units_by_hand() -> None:
    assert effective_units(VALUES, GROUPS) == pytest.approx(N_EFF, rel=1e-12)
    # runs scattered as much within families as between: every run its own draw
    assert effective_units([0.1, -0.1, 0.1, -0.1], ["a", "a", "b", "b"]) == 4.0
    # a family's runs identical: one draw per family
    assert effective_units([0.1, 0.1, -0.1, -0.1], ["a", "a", "b", "b"]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        effective_units([0.1, 0.2], ["a"])


def test_interval_uses_the_effective_draws() -> None:
    # floor(2.667) = 2 draws: t(1, 0.90) = 3.078 from a printed t table; the 1/k term of
    # k = 2.667
    half = 3.078 * SD * math.sqrt(1 + 1 / N_EFF)
    lo, hi = residual_interval(VALUES, 80, groups=GROUPS)
    assert (lo, hi) == pytest.approx((0.1 - half, 0.1 + half), abs=1e-9)
    # between the two limits: families as the only units (k = 2) and runs (k = 6)
    fam = residual_interval(VALUES, 80, units=2)
    run = residual_interval(VALUES, 80)
    assert run[1] - run[0] < hi - lo < fam[1] - fam[0]
