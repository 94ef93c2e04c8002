"""int64 tensors (cross-entropy targets, token ids as PyTorch passes them): tests/codegen/specs/
int64_pick.yaml gathers each row's target logit by an int64 tile (and scatter-adds a count at
it), keeps 64-bit keys beyond int32 (and splits them again by // and %, negative ones included),
sums and scans them across warps and indexes by an int64 scalar; on the CPU interpreter against the reference and an independent
computation, in the gfx942 emulation, through both compilers and (marked gpu) on the GPU with
NaN-poisoned outputs. Then the language's rules for int64 and the call-time dtype error."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for helpers
import helpers  # noqa: E402

import kgen  # noqa: E402
from kgen.backends import available  # noqa: E402
from kgen.build import build_variant  # noqa: E402
from kgen.errors import LaunchError, SpecError  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.knobs import knobs  # noqa: E402
from kgen.lang import kernel_ir  # noqa: E402
from kgen.ir.core import walk  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPEC = HERE / "specs" / "int64_pick.yaml"
OUTPUTS = ("picked", "keys", "halves", "running", "block_sum", "first", "hits")
DT = {"fp32": torch.float32, "bf16": torch.bfloat16}
BLOCK_M = 512  # the spec's tunable: the block that sums and scans


def _inputs(m: int, v: int, dtype: str, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(-1, v + 1, (m,), generator=gen)  # int64, as torch makes index tensors
    target[:3] = torch.tensor([-1, v, v - 1])  # both edges of the range, and the last class
    return {"logits": torch.randn(m, v, generator=gen).to(DT[dtype]), "target": target}


def _want(ins: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Row by row in Python integers, independently of the spec's reference."""
    logits, target = ins["logits"].double(), ins["target"].tolist()
    m, v = logits.shape
    picked, keys, halves = [], [], []
    for r, t in enumerate(target):
        picked.append((float(logits[r, t]) if 0 <= t < v else 0.0) + t % 3)
        keys.append(t * 2**32 + r)
        halves.append(t * 100000 + r)
    blocks = [keys[i:i + BLOCK_M] for i in range(0, m, BLOCK_M)]
    running = [sum(b[:j + 1]) for b in blocks for j in range(len(b))]
    first = [float(logits[i, min(max(target[i], 0), v - 1)]) for i in range(0, m, BLOCK_M)]
    return {"picked": torch.tensor(picked, dtype=torch.float64), "keys": torch.tensor(keys),
            "halves": torch.tensor(halves), "running": torch.tensor(running),
            "block_sum": torch.tensor([sum(b) for b in blocks]), "first": torch.tensor(first, dtype=torch.float64),
            "hits": torch.tensor([float(target.count(c)) for c in range(v)], dtype=torch.float64)}


def _check(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got["keys"].dtype == torch.int64 and got["block_sum"].dtype == torch.int64 and got["halves"].dtype == torch.int32
    for name in ("keys", "halves", "running", "block_sum"):  # integers: exact
        assert torch.equal(got[name].cpu().long(), want[name]), name
    assert torch.equal(got["hits"].cpu().double(), want["hits"]) and want["hits"].sum() < len(want["keys"])  # -1, V skipped
    for name in ("picked", "first"):  # an fp32 sum of a 16-bit logit and a small integer
        torch.testing.assert_close(got[name].cpu().double(), want[name], rtol=1e-6, atol=1e-6)
    assert int(want["keys"].abs().max()) > 2**31, "the keys must need 64 bits for this test to mean anything"


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("m", [3, 600])  # one partial block; two, the second partial
def test_interpreter_matches(dtype, m):
    ls, ins = load_spec(SPEC), _inputs(m, 50, dtype, seed=m)
    got = helpers.run_spec_cpu(ls, {"dtype": dtype}, dict(ins), {"M": m, "V": 50}, {})
    helpers.check_outputs(ls, got, ins, {}, {"dtype": dtype})
    _check(got, _want(ins))


def test_op_takes_int64_and_names_the_dtype_it_needs():
    op = kgen.load(SPEC)
    ins = _inputs(600, 50, "fp32")
    _check(dict(zip(OUTPUTS, op(**ins))), _want(ins))
    with pytest.raises(LaunchError) as err:
        op(ins["logits"], ins["target"].to(torch.int32))
    assert str(err.value) == ("int64_pick: 'target' has dtype torch.int32; this call needs torch.int64 "
                              "(the spec declares it int64)")


def test_gfx942_emulation_matches():
    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no hip compiler was found")
        pytest.skip("no hip compiler found")
    ins = _inputs(600, 50, "bf16")
    got = kgen.load(SPEC, target="gfx942", emulate=True)(**ins)
    _check(dict(zip(OUTPUTS, got)), _want(ins))


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_compiles_64_bit(target):
    backend = load_target(target).backend
    if not available(backend):
        if knobs().ci:
            pytest.fail(f"CI=true but no {backend} compiler was found")
        pytest.skip(f"no {backend} compiler found")
    (k,) = build_variant(load_spec(SPEC), {"dtype": "bf16"}, load_target(target), compile=True).kernels
    assert k.resources["spill_bytes"] == 0 and k.resources["stack_bytes"] == 0, k.resources
    src = k.source
    assert "const long long* __restrict__ t_target" in src and "long long* __restrict__ t_keys" in src
    # 64-bit literals, bounds test and conversions: no int or float in between
    assert "4294967296LL" in src and "(unsigned long long)(t[e])" in src and "(int)(" in src
    assert "kg::cvt<long long>" not in src and "kg::cvt<int>" not in src


def _types(tmp_path, program: str) -> dict[str, str]:
    """The dtype of each named value of a one-kernel spec with int64 input `t` and int32 `u`."""
    path = tmp_path / "s.yaml"
    path.write_text(f"""kgen: 1
name: s
summary: s
sizes: [N]
tensors:
  t: {{shape: [N], dtype: int64}}
  u: {{shape: [N], dtype: int32}}
  y: {{shape: [N], dtype: fp32, role: output}}
kernels:
  - name: k
    grid: "1"
    program: |
{''.join('      ' + line + chr(10) for line in program.strip().splitlines())}
reference: y = t.float()
""")
    k = kernel_ir(load_spec(path), 0, {}, {})
    return {r.name: r.dtype for op in walk(k.body) for r in op.results if r.name}


def test_int64_arithmetic_stays_64_bit(tmp_path):
    got = _types(tmp_path, """
a = load(t[block(0, 16)])
b = load(u[block(0, 16)])
s = a + b
q = a // 3
m = a % b
n = -a
big = b * 10000000000
f = a / 2
c = a.to(fp32) * 2
w = where(a > 0, a, b)
x = maximum(b, a)
nar = a.to(int32)
z = load(u[a])
i = load(u[load(t[0])])
for j in range(load(t[1]), N):
    pass
store(y[block(0, 16)], f + c)
""")
    assert got["a"] == "int64" and got["b"] == "int32"
    assert {got[n] for n in ("s", "q", "m", "n", "big", "w", "x")} == {"int64"}
    assert got["f"] == "fp32" and got["c"] == "fp32" and got["nar"] == "int32"
    assert got["z"] == "int32" and got["i"] == "int32"  # an int64 tile and scalar index an int32 tensor


@pytest.mark.parametrize("line, message", [
    ("q = load(t[block(0, 16)]) // 2.0", "'//' is for integers; got fp32"),
    ("q = load(t[block(0, 16)]).to(fp32)[:, None]\nr = load(u[q])",
     "a tensor index must be an integer scalar, an integer tile or block(i, size), got 16x1 fp32"),
])
def test_int64_errors(tmp_path, line, message):
    with pytest.raises(SpecError) as e:
        _types(tmp_path, line + "\nstore(y[block(0, 16)], 0.0)")
    assert message in str(e.value)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gpu_matches(dtype, monkeypatch, tmp_path):
    monkeypatch.setenv("KGEN_POISON", "1")  # float outputs start as NaN: an unwritten element fails
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path))
    ins = _inputs(5000, 1000, dtype, seed=7)
    got = dict(zip(OUTPUTS, kgen.load(SPEC)(**{k: v.cuda() for k, v in ins.items()})))
    assert all(t.is_cuda for t in got.values())
    _check(got, _want(ins))
    helpers.check_outputs(load_spec(SPEC), {k: v.cpu() for k, v in got.items()}, ins, {}, {"dtype": dtype})
