"""Call-time binding of a spec's op (kgen/runtime/binding.py, KgenOp._positional): variant axes
read off input shapes, and options checked by type before torch's schema would convert them."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kgen
from kgen.errors import LaunchError

SPECS = Path(__file__).resolve().parents[2] / "specs"


@pytest.fixture(scope="module")
def fa2_fwd():
    return kgen.load(SPECS / "fa2_fwd.yaml")


def _qk(d: int):
    torch.manual_seed(0)
    return torch.randn(1, 3, 2, d, dtype=torch.bfloat16), torch.randn(1, 4, 1, d, dtype=torch.bfloat16)


def test_axis_that_sizes_an_input_is_read_off_its_shape(fa2_fwd):
    q, k = _qk(128)  # head_dim 128, not the axis' first value (64), and not passed
    o, lse = fa2_fwd(q, k, k, softmax_scale=0.1)
    assert o.shape == q.shape and torch.isfinite(o.float()).all()


def test_unsupported_axis_value_read_off_a_shape_is_named(fa2_fwd):
    q, k = _qk(48)
    with pytest.raises(LaunchError, match=r"^fa2_fwd: head_dim=48 is not supported; accepted: 32, 64, 128$"):
        fa2_fwd(q, k, k, softmax_scale=0.1)


@pytest.mark.parametrize("kwargs, message", [
    ({"causal": 1}, "fa2_fwd: causal=1 is not supported; accepted: False, True"),
    ({"deterministic": "yes"}, "fa2_fwd: deterministic='yes' is not supported; accepted: False, True"),
    ({"head_dim": 96}, "fa2_fwd: head_dim=96 is not supported; accepted: 32, 64, 128"),
])
def test_options_are_checked_by_value_and_type(fa2_fwd, kwargs, message):
    q, k = _qk(64)
    with pytest.raises(LaunchError) as e:
        fa2_fwd(q, k, k, softmax_scale=0.1, **kwargs)
    assert str(e.value) == message
