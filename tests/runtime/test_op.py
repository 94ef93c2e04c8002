"""kgen ops as PyTorch ops, on the CPU (the IR interpreter runs the kernels).

`torch.library.opcheck` on every example forward and backward op; torch.compile(fullgraph=True)
of forward + backward, matching eager; the autograd wiring against float64 torch; double
backward refused clearly; and the one-sentence errors for bad inputs.

Sizes are small and no multiple of any block size (M=5 against BLOCK_M=4, N=37 and K=11 against
blocks of 32 and more), so every kernel runs masked edge blocks; the interpreter then takes
milliseconds a call. torch.compile uses the aot_eager backend: it traces the same forward and
backward graphs as inductor (so graph breaks and fake-tensor bugs show) without inductor's C++
compile, which took ~30 s here for the first graph.
"""
from __future__ import annotations

import sys
import zlib
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/runtime, for example_ops
import example_ops  # noqa: E402
from example_ops import SPECS, helpers  # noqa: E402

import kgen  # noqa: E402
from kgen.errors import LaunchError  # noqa: E402
from kgen.runtime.binding import NAMES, TORCH  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SIZES = {"M": 5, "N": 37, "K": 11}
BACKWARD_OPS = ("softmax_bwd", "rmsnorm_bwd", "matmul_bwd")


@pytest.fixture(scope="module", autouse=True)
def poison():
    """NaN in every output before the kernels run, so that an unwritten element shows."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KGEN_POISON", "1")
        yield


@pytest.fixture(scope="module")
def ops() -> dict[str, kgen.runtime.op.KgenOp]:
    """Every example op by spec name, the backward ops as loaded with their forward op."""
    out = {}
    for name in example_ops.FORWARD_OPS:
        op = kgen.load(SPECS / f"{name}.yaml")
        out[name], out[op.backward_op.spec.name] = op, op.backward_op
    return out


def _dtype(name: str) -> torch.dtype:
    """fp32 where the spec has it, else its first (16-bit) dtype."""
    dtypes = load_spec(SPECS / f"{name}.yaml").spec.variants["dtype"]
    return TORCH["fp32" if "fp32" in dtypes else dtypes[0]]


def _inputs(op, sizes=SIZES, dtype=None, requires_grad=False) -> dict[str, torch.Tensor]:
    """torch.randn inputs by name, seeded by the op's name; `dtype` (default: _dtype) decides the
    variant. rmsnorm_bwd's rstd is made positive, as a real 1/sqrt would be."""
    variant = {"dtype": NAMES[dtype or _dtype(op.spec.name)]}
    gen = torch.Generator().manual_seed(zlib.crc32(op.spec.name.encode()))
    out = helpers.random_inputs(op.spec, variant, sizes, gen)
    if "rstd" in out:
        out["rstd"] = out["rstd"].abs() + 0.5
    return {n: t.requires_grad_(requires_grad) for n, t in out.items()}


def _overload(op):
    return getattr(torch.ops.kgen, op.spec.name).default


def _op_args(op, inputs: dict[str, torch.Tensor]) -> tuple:
    """The positional arguments of the torch.library op: the tensors, then the scalars and
    options with their defaults (the schema itself has no defaults)."""
    return tuple(op._positional(tuple(inputs.values()), {}))


# ---- opcheck -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", example_ops.FORWARD_OPS)
def test_opcheck_forward(ops, name):
    """Schema, fake tensor, autograd registration, and AOT dispatch (forward and gradients,
    static and dynamic shapes) agree with eager."""
    op = ops[name]
    result = torch.library.opcheck(_overload(op), _op_args(op, _inputs(op, requires_grad=True)))
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize("name", BACKWARD_OPS)
def test_opcheck_backward(ops, name):
    """A backward op is called by autograd with grad mode off: opcheck it on plain inputs, and
    check its autograd registration (the refusal below) on inputs that require grad."""
    op = ops[name]
    result = torch.library.opcheck(_overload(op), _op_args(op, _inputs(op)))
    assert set(result.values()) == {"SUCCESS"}, result
    result = torch.library.opcheck(_overload(op), _op_args(op, _inputs(op, requires_grad=True)),
                                   test_utils="test_autograd_registration")
    assert result == {"test_autograd_registration": "SUCCESS"}


def test_double_backward_is_refused(ops):
    op = ops["softmax"]
    (x,) = _inputs(op, requires_grad=True).values()
    (gx,) = torch.autograd.grad(op(x).pow(2).sum(), x, create_graph=True)
    with pytest.raises(LaunchError, match=r"^kgen::softmax_bwd cannot be differentiated: its spec has no "
                                          r"autograd\.backward \(.*double backward is not supported\)$"):
        gx.sum().backward()


def test_backward_op_called_with_grad_refuses_to_be_differentiated(ops):
    """Called on inputs that require grad, a backward op's outputs get its own autograd node,
    which refuses. (Before, on the CPU the interpreter's torch ops were recorded onto them and
    differentiated; on a GPU PyTorch's fallback only warned and passed no gradient on.)"""
    op = ops["rmsnorm_bwd"]
    dx, dw = op(**_inputs(op, requires_grad=True))
    with pytest.raises(LaunchError, match=r"^kgen::rmsnorm_bwd cannot be differentiated"):
        (dx.sum() + dw.sum()).backward()


# ---- autograd wiring ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", example_ops.FORWARD_OPS)
def test_forward_and_backward_match_torch(ops, name):
    op = ops[name]
    example_ops.check_forward_backward(op, _inputs(op), torch.Generator().manual_seed(1))


# ---- torch.compile -----------------------------------------------------------------------------

def _recording_backend(graphs: dict[str, list[torch.fx.GraphModule]]):
    """aot_eager that also keeps the forward and backward graphs AOTAutograd hands over."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind].append(gm)
            return make_boxed_func(gm.forward)
        return compiler
    return aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"))


def _loss(op):
    """loss(*inputs, *weights) = sum over the differentiable outputs of (output * weight).sum()."""
    diff = [n for n in op.outputs if op.spec.tensors[n].grad]

    def loss(*args):
        outs = op(*args[:len(op.inputs)])
        outs = dict(zip(op.outputs, outs if isinstance(outs, tuple) else (outs,)))
        return sum((outs[n].float() * w).sum() for n, w in zip(diff, args[len(op.inputs):]))
    return loss, diff


def _targets(gm: torch.fx.GraphModule) -> set[str]:
    return {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}


@pytest.mark.parametrize("name", example_ops.FORWARD_OPS)
def test_compile_fullgraph_matches_eager(ops, name):
    op = ops[name]
    torch._dynamo.reset()
    inputs = list(_inputs(op).values())
    loss, diff = _loss(op)
    gen = torch.Generator().manual_seed(2)
    shapes = {n: helpers.tensor_shape(op.spec, n, SIZES) for n in diff}
    weights = [torch.randn(shapes[n], generator=gen) for n in diff]

    def run(fn):
        leaves = [x.detach().clone().requires_grad_() for x in inputs]
        value = fn(*leaves, *weights)
        value.backward()
        return value.detach(), [x.grad for x in leaves]

    graphs = {"forward": [], "backward": []}
    # fullgraph=True: any graph break raises instead of splitting the function
    compiled = torch.compile(loss, fullgraph=True, backend=_recording_backend(graphs))
    value_c, grads_c = run(compiled)
    value_e, grads_e = run(loss)
    assert [len(graphs["forward"]), len(graphs["backward"])] == [1, 1]
    assert f"kgen.{name}.default" in _targets(graphs["forward"][0])
    assert f"kgen.{op.backward_op.spec.name}.default" in _targets(graphs["backward"][0])
    torch.testing.assert_close(value_c, value_e)
    for g_c, g_e in zip(grads_c, grads_e):
        assert g_c is not None and torch.isfinite(g_c).all()
        torch.testing.assert_close(g_c, g_e)


# ---- bad inputs: one sentence naming the argument and what is accepted --------------------------

def _t(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


BAD_CALLS = [
    pytest.param("softmax", lambda: (_t(5, 37, dtype=torch.float64),), {},
                 "softmax: 'x' has dtype torch.float64; accepted: torch.bfloat16, torch.float16, torch.float32",
                 id="dtype-not-accepted"),
    pytest.param("matmul", lambda: (_t(5, 11), _t(11, 37)), {},
                 "matmul: 'a' has dtype torch.float32; accepted: torch.bfloat16, torch.float16",
                 id="dtype-not-built"),
    pytest.param("rmsnorm", lambda: (_t(5, 37), _t(37, dtype=torch.float16)), {},
                 "rmsnorm: 'w' has dtype torch.float16; this call needs torch.float32 (its dtype is the variant axis dtype, "
                 "which 'x' sets)",
                 id="dtypes-disagree"),
    pytest.param("softmax", lambda: (_t(2, 5, 37),), {},
                 "softmax: 'x' has 3 dims (2, 5, 37); expected 2 dims ['M', 'N']",
                 id="wrong-rank"),
    pytest.param("rmsnorm", lambda: (_t(5, 37), _t(36)), {},
                 "rmsnorm: 'w' dim 0 is 36, but N = 37 from another input",
                 id="shape-mismatch-N"),
    pytest.param("matmul", lambda: (_t(5, 11, dtype=torch.bfloat16), _t(12, 37, dtype=torch.bfloat16)), {},
                 "matmul: 'b' dim 0 is 12, but K = 11 from another input",
                 id="shape-mismatch-K"),
    pytest.param("softmax", lambda: (_t(37, 5).t(),), {},
                 "softmax: 'x' must have a contiguous last dim (stride 1), got strides (1, 5)",
                 id="strided-last-dim"),
    pytest.param("softmax", lambda: (_t(0, 37),), {},
                 "softmax: 'x' dim 0 (M) is 0; kgen ops need non-empty inputs",
                 id="empty"),
    pytest.param("rmsnorm", lambda: (_t(5, 37), _t(37), 1e-5, 1.0), {},
                 "rmsnorm() takes 3 arguments (x, w, eps), got 4",
                 id="too-many-arguments"),
    pytest.param("rmsnorm", lambda: (_t(5, 37), _t(37)), {"epsilon": 1e-5},
                 "rmsnorm() got an unknown argument 'epsilon'; accepted: x, w, eps",
                 id="unknown-keyword"),
    pytest.param("rmsnorm", lambda: (_t(5, 37),), {},
                 "rmsnorm() is missing the argument 'w'",
                 id="missing-argument"),
]


@pytest.mark.parametrize("name, make_args, kwargs, message", BAD_CALLS)
def test_bad_input_is_one_clear_sentence(ops, name, make_args, kwargs, message):
    # inputs on two devices: test_ops_gpu.py (needs a GPU)
    with pytest.raises(LaunchError) as err:
        ops[name](*make_args(), **kwargs)
    assert str(err.value) == message


def test_an_input_of_a_declared_dtype_names_the_declaration():
    """An int64 index where the spec declares int32 (the error once blamed the other inputs)."""
    op = kgen.load(Path(__file__).resolve().parents[1] / "codegen" / "specs" / "scalar_ops.yaml")
    x, scale = torch.randn(5), torch.tensor([1.0, -1.5])
    with pytest.raises(LaunchError) as err:
        op(x, torch.arange(5), scale)
    assert str(err.value) == ("scalar_ops: 'c' has dtype torch.int64; this call needs torch.int32 "
                              "(the spec declares it int32)")


def test_a_tensor_a_map_cannot_describe_is_copied_first():
    """Tensor copies need a 16-byte aligned address, byte strides that are multiples of 16, and
    (kgen's rule) strides shrinking towards the last dim; anything else is copied contiguous."""
    from kgen.runtime.plan import _tensor_map_ready

    x = torch.randn(4, 6, 64, dtype=torch.bfloat16)
    flat = x.view(-1)
    kept = [x, x[:, ::2], flat[8:8 + 3 * 6 * 64].view(3, 6, 64),  # a strided view; 16 bytes in
            torch.randn(4, 6, 72, dtype=torch.bfloat16)[..., :64]]  # rows 144 bytes apart
    for t in kept:
        assert _tensor_map_ready(t) is t
    copied = [flat[1:1 + 3 * 6 * 64].view(3, 6, 64),  # 2 bytes in
              x.transpose(0, 1),  # strides growing towards the last dim
              torch.randn(4, 6, 68, dtype=torch.bfloat16)[..., :64]]  # rows 136 bytes apart
    for t in copied:
        got = _tensor_map_ready(t)
        assert got is not t and got.is_contiguous() and got.data_ptr() % 16 == 0 and torch.equal(got, t)
