"""Limits are validated at every entry (the Python API, an env's config mapping, the HTTP body):
finite and positive, lowered to the documented maxima, null means the default; anything else is an
error naming the field. Property-based: hypothesis throws every kind of value at every field."""

from __future__ import annotations

import dataclasses
import math

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="property tests need hypothesis (pip install 'skyrl-gym[dev]')")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from skygym_sandboxes import Limits, RunRequest  # noqa: E402
from skygym_sandboxes.service import BadRequest, request_from_body  # noqa: E402
from skygym_sandboxes.types import LIMIT_MAXIMA  # noqa: E402

FIELDS = [field.name for field in dataclasses.fields(Limits)]
DEFAULTS = Limits()

any_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e10, 1e308, float("inf"), float("-inf"), float("nan"), 0, -0.0, 5e-324]),
    st.sampled_from([10**400, -(10**400)]),  # valid JSON that no float holds
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
)


def acceptable(value) -> bool:
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return value > 0  # a whole number is finite however many digits it has (it is lowered to the maximum)
    return math.isfinite(value) and value > 0


def check_valid(limits: Limits) -> None:
    for name in FIELDS:
        value = getattr(limits, name)
        assert value is not None, name
        assert isinstance(value, (int, float)) and not isinstance(value, bool), (name, value)
        assert math.isfinite(value) and 0 < value <= LIMIT_MAXIMA[name], (name, value)


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(FIELDS), value=any_value)
def test_a_limit_is_valid_or_refused_with_its_name(name, value):
    if acceptable(value):
        limits = Limits(**{name: value})
        check_valid(limits)
        if value is None:
            assert getattr(limits, name) == getattr(DEFAULTS, name)  # null is the default, never "no limit"
        else:
            assert getattr(limits, name) >= min(value, LIMIT_MAXIMA[name]) - 1e-9
    else:
        with pytest.raises(ValueError, match=name):
            Limits(**{name: value})


@settings(max_examples=200, deadline=None)
@given(values=st.dictionaries(st.sampled_from(FIELDS), any_value, max_size=4))
def test_config_mappings_and_requests_go_through_the_same_checks(values):
    ok = all(acceptable(value) for value in values.values())
    if ok:
        check_valid(Limits.from_dict(values))
        check_valid(RunRequest(code="pass", limits=values).limits)
    else:
        bad = next(name for name, value in values.items() if not acceptable(value))
        with pytest.raises(ValueError, match="Limits\\."):
            Limits.from_dict(values)
        with pytest.raises(ValueError) as raised:
            RunRequest(code="pass", limits=values)
        assert any(name in str(raised.value) for name in values), (bad, raised.value)


@settings(max_examples=200, deadline=None)
@given(
    values=st.dictionaries(st.sampled_from(FIELDS), any_value, max_size=4),
    run_timeout=any_value,
    memory=any_value,
)
def test_http_bodies_give_valid_limits_or_a_bad_request_naming_the_field(values, run_timeout, memory):
    service_limits = Limits(wall_s=5, cpu_s=5)
    body = {"code": "print(1)", "limits": values, "run_timeout": run_timeout, "memory_limit_MB": memory}
    try:
        request = request_from_body(body, service_limits)
    except BadRequest as exc:
        assert any(field in str(exc) for field in ("limits", "run_timeout", "memory_limit_MB")), exc
        return
    check_valid(request.limits)
    for name in FIELDS:  # the service's limits are ceilings: no request gets more than the operator allowed
        assert getattr(request.limits, name) <= getattr(service_limits, name), (name, body)
    for name, value in values.items():
        if value is None and name not in ("wall_s", "cpu_s", "memory_mb"):
            # JSON null keeps the service's own value: it never lifts a limit.
            assert getattr(request.limits, name) == getattr(service_limits, name)


def test_the_documented_extremes():
    assert Limits(wall_s=1e10).wall_s == LIMIT_MAXIMA["wall_s"]
    assert Limits(memory_mb=0.5).memory_mb == 1  # whole-number limits round up
    assert Limits(wall_s=None).wall_s == DEFAULTS.wall_s
    for bad in (float("inf"), float("nan"), 0, -1, "10", True):
        with pytest.raises(ValueError, match="wall_s"):
            Limits(wall_s=bad)
    with pytest.raises(BadRequest, match="run_timeout|wall_s"):
        request_from_body({"code": "1", "run_timeout": float("nan")}, DEFAULTS)
    assert request_from_body({"code": "1", "limits": None}, DEFAULTS).limits == DEFAULTS
