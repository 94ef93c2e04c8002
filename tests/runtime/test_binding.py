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
    q, k = _qk(36)  # not a multiple of 8: outside the axis' open_variants condition
    with pytest.raises(LaunchError) as e:
        fa2_fwd(q, k, k, softmax_scale=0.1)
    assert str(e.value) == "fa2_fwd: head_dim=36 is not supported; accepted: 32, 64, 128, or an integer with head_dim % 8 == 0 and head_dim >= 16 and head_dim <= 256"


@pytest.mark.parametrize("kwargs, message", [
    ({"causal": 1}, "fa2_fwd: causal=1 is not supported; accepted: False, True"),
    ({"deterministic": "yes"}, "fa2_fwd: deterministic='yes' is not supported; accepted: False, True"),
    ({"head_dim": 100}, "fa2_fwd: head_dim=100 is not supported; accepted: 32, 64, 128, or an integer with head_dim % 8 == 0 and head_dim >= 16 and head_dim <= 256"),
])
def test_options_are_checked_by_value_and_type(fa2_fwd, kwargs, message):
    q, k = _qk(64)
    with pytest.raises(LaunchError) as e:
        fa2_fwd(q, k, k, softmax_scale=0.1, **kwargs)
    assert str(e.value) == message


def test_an_input_shape_expression_is_checked_against_the_bound_sizes():
    """ssd_bwd's prev_states (batch, cdiv(seqlen, chunk_size), nheads, headdim, dstate), saved by
    the forward: seqlen comes from x, and a prev_states with another number of chunks is named."""
    from kgen.runtime.binding import bind, choose_variant

    from kgen.spec.load import load_spec

    ls = load_spec(SPECS / "ssd_bwd.yaml")
    b, L, h, p, g, n, q = 1, 130, 2, 64, 1, 64, 64
    bf, f32 = torch.bfloat16, torch.float32
    t = {"x": torch.randn(b, L, h, p, dtype=bf), "dt": torch.randn(b, L, h, dtype=bf), "A": torch.randn(h),
         "B": torch.randn(b, L, g, n, dtype=bf), "C": torch.randn(b, L, g, n, dtype=bf), "D": torch.randn(h, p),
         "dt_bias": torch.randn(h), "initial_states": torch.randn(b, h, p, n), "seq_idx": torch.zeros(b, L, dtype=torch.int32),
         "dy": torch.randn(b, L, h, p, dtype=bf), "dfinal_states": torch.randn(b, h, p, n, dtype=f32),
         "prev_states": torch.randn(b, 3, h, p, n, dtype=bf),
         # ungated: the gate's tensors have seqlen * gated = 0 positions
         "z": torch.empty(b, 0, h, p, dtype=bf), "out_x": torch.empty(b, 0, h, p, dtype=bf)}
    variant = choose_variant(ls, t, {"chunk_size": q, "headdim": p, "dstate": n, "packed": False, "gated": False})
    assert bind(ls, t, variant, torch.device("cpu"))["seqlen"] == L  # 3 = cdiv(130, 64) chunks
    t["prev_states"] = torch.randn(b, 2, h, p, n, dtype=bf)
    with pytest.raises(LaunchError) as e:
        bind(ls, t, variant, torch.device("cpu"))
    assert str(e.value) == "ssd_bwd: 'prev_states' dim 1 is 2; expected cdiv(seqlen, chunk_size) = 3"
    t["prev_states"] = torch.randn(b, 3, h, p, n, dtype=bf)
    t["z"] = torch.randn(b, L, h, p, dtype=bf)  # a gate given to an ungated variant
    with pytest.raises(LaunchError) as e:
        bind(ls, t, variant, torch.device("cpu"))
    assert str(e.value) == f"ssd_bwd: 'z' dim 1 is {L}; expected seqlen * gated = 0"
