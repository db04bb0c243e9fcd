"""The shared length-distribution syntax (simulate and bench)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ridgeline.errors import RidgelineError
from ridgeline.workload.lengths import parse_lengths


def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def test_fixed_and_bare_number() -> None:
    assert parse_lengths("fixed:256").sample(4, rng()).tolist() == [256] * 4
    assert parse_lengths("300").sample(2, rng()).tolist() == [300, 300]


def test_uniform_bounds_are_inclusive() -> None:
    x = parse_lengths("uniform:min=10,max=12").sample(3000, rng())
    assert set(x.tolist()) == {10, 11, 12}


def test_lognormal_mean_parameterisation() -> None:
    # mean = exp(mu + sigma^2/2) -> mu = ln(1000) - 0.18
    d = parse_lengths("lognormal:mean=1000,sigma=0.6")
    assert d.params["mu"] == pytest.approx(math.log(1000) - 0.18)
    x = d.sample(400_000, rng())
    assert x.mean() == pytest.approx(1000, rel=0.01)
    assert np.median(x) == pytest.approx(math.exp(math.log(1000) - 0.18), rel=0.01)


def test_lognormal_median_parameterisation() -> None:
    x = parse_lengths("lognormal:median=800,sigma=0.5").sample(200_000, rng())
    assert np.median(x) == pytest.approx(800, rel=0.01)


def test_exponential_and_normal_means_and_clip() -> None:
    x = parse_lengths("exponential:mean=200").sample(400_000, rng())
    assert x.mean() == pytest.approx(200, rel=0.01)
    y = parse_lengths("normal:mean=50,std=100,min=5,max=60").sample(10_000, rng())
    assert y.min() == 5 and y.max() == 60


def test_empirical_from_file(tmp_path) -> None:
    f = tmp_path / "lens.txt"
    f.write_text("3\n5\n7\n")
    d = parse_lengths(f"empirical:path={f}")
    assert set(d.sample(1000, rng()).tolist()) == {3, 5, 7}
    assert d.mean_tokens == 5.0
    g = tmp_path / "lens.json"
    g.write_text("[10, 20]")
    assert set(parse_lengths(f"empirical:{g}").sample(100, rng()).tolist()) == {10, 20}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("zipf:a=2", "unknown distribution 'zipf'"),
        ("lognormal:mean=1000", "missing 'sigma='"),
        ("uniform:min=9,max=3", "max >= min"),
        ("exponential:mean=-1", "must be > 0"),
        ("normal:mean=5,std=1,foo=2", "does not take foo"),
        ("fixed:abc", "is not a number"),
        ("empirical:path=/nonexistent/x", "not found"),
        ("", "empty"),
    ],
)
def test_bad_specs_name_the_flag(spec: str, message: str) -> None:
    with pytest.raises(RidgelineError) as err:
        parse_lengths(spec, "--output")
    assert str(err.value).startswith("--output")
    assert message in str(err.value)
    assert "\n" not in str(err.value)
