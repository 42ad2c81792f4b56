"""The one non-finite rule: nan, +-inf and |v| >= float max are not values (issue 39.1)."""

import math
import sys

import pytest

from air_skills.runtime.results.finite import (
    diverged_note,
    finite_or_none,
    is_finite_value,
    json_value,
    show_value,
)

MAX = sys.float_info.max

CASES = [
    # value, finite, shown
    (0.0, True, "0"),
    (0.392, True, "0.392"),
    (-3, True, "-3"),
    (1.79e308, True, "1.79e+308"),  # below float max: a (huge) number
    (MAX, False, "inf"),  # MLflow's clamp of inf
    (-MAX, False, "-inf"),
    (math.inf, False, "inf"),
    (-math.inf, False, "-inf"),
    (math.nan, False, "nan"),
    ("inf", False, "inf"),
    (None, False, "-"),
    (True, False, "True"),
]


@pytest.mark.parametrize(("value", "finite", "shown"), CASES)
def test_rule(value, finite, shown):
    assert is_finite_value(value) is finite
    assert show_value(value) == shown
    assert (finite_or_none(value) is not None) is finite


def test_json_value_names_non_finite():
    assert json_value(MAX) == "inf"
    assert json_value(-math.inf) == "-inf"
    assert json_value(math.nan) == "nan"
    assert json_value(1.5) == 1.5


def test_diverged_note():
    assert diverged_note(2, 3) == "2 of 3 diverged"
    assert diverged_note(0, 3) == ""
