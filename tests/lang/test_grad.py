"""`grad(hook, i)`: a hook's derivative by the tile language's own forward-mode differentiation
(kgen/lang/derivative.py), against torch.autograd of the same hook (kgen/check/torch_hooks.py) on
tests/lang/specs/score_grad.yaml with score_mod overridden by bodies that use every rule: the
chain rule through the functions, products, quotients, powers, where/maximum, locals, another
hook, other arguments (derivative 0). On the CPU interpreter for each; compiled for both targets,
in the gfx942 emulation and on the GPU for one; then the errors."""
from __future__ import annotations

import ast
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
from kgen.errors import SpecError  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.knobs import knobs  # noqa: E402
from kgen.lang.derivative import derivative_body  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

BASE = HERE / "specs" / "score_grad.yaml"
M, N = 9, 200
BODIES = {
    "softcap": ("cap * tanh(score / cap)", None),
    "functions": ("score * sigmoid(score) + exp2(score * 0.5) - log(abs(score) + 1.0) + erf(score) - exp(-score * score)", None),
    "branches": ("where(score > 0.0, score * score, -score) + maximum(score, 0.5 * score) - minimum(score, 1.0)", None),
    "locals": ("t = score / 2.0\nu = erf(t) * t\nreturn u + sqrt(t * t + 1.0) - rsqrt(t * t + 2.0)", None),
    "quotient": ("(score ** 3.0) / (1.0 + score * score) + sin(score) * cos(2.0 * score)", None),
    "other_args": ("score * (row - col) + 1.0 * row", None),
    "constant": ("2.0 * score + cap", None),
    "no_score": ("cap * 1.0", None),
    "nested": ("soft(score) * score", "tanh(v) + v * v"),
}


def _spec(tmp_path: Path, body: str, soft: str | None) -> Path:
    (tmp_path / "score_grad.yaml").write_text(BASE.read_text())
    hooks = {"score_mod": body, **({"soft": soft} if soft else {})}
    text = "kgen: 1\nextends: score_grad.yaml\nname: derived\nsummary: s\nhooks:\n"
    for name, b in hooks.items():
        text += f"  {name}: |\n" + "".join(f"    {line}\n" for line in b.splitlines())
    path = tmp_path / "derived.yaml"
    path.write_text(text)
    return path


def _x() -> torch.Tensor:
    return torch.randn(M, N, generator=torch.Generator().manual_seed(3)) * 2


@pytest.mark.parametrize("case", list(BODIES))
def test_the_derivative_matches_autograd(tmp_path, case):
    ls = load_spec(_spec(tmp_path, *BODIES[case]))
    x = _x()
    got = helpers.run_spec_cpu(ls, {}, {"x": x}, {"M": M, "N": N}, {"cap": 3.0})["g"]
    want = helpers.reference(ls, {"x": x})["g"]
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


def test_zero_and_one_leave_no_multiplications():
    body = ast.parse("return score * (row - col) + 2.0 * score").body
    (ret,) = derivative_body(body, ("score", "row", "col"), 0, set())
    assert ast.unparse(ret) == "return row - col + 2.0"


def test_gfx942_emulation_and_both_compilers(tmp_path):
    path = _spec(tmp_path, *BODIES["locals"])
    for target in ("sm_90", "gfx942"):
        if not available(load_target(target).backend):
            if knobs().ci:
                pytest.fail(f"CI=true but no {load_target(target).backend} compiler was found")
            continue
        (k,) = build_variant(load_spec(path), {}, load_target(target), compile=True).kernels
        assert k.resources["spill_bytes"] == 0
    if available("hip"):
        x = _x()
        got = kgen.load(path, target="gfx942", emulate=True)(x)
        torch.testing.assert_close(got.double(), helpers.reference(load_spec(path), {"x": x})["g"], rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
def test_gpu_matches(tmp_path):
    path = _spec(tmp_path, *BODIES["functions"])
    x = _x()
    got = kgen.load(path)(x.cuda()).cpu()
    torch.testing.assert_close(got.double(), helpers.reference(load_spec(path), {"x": x})["g"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("body, program, message", [
    ("score ** score", None, "grad(score_mod, 'score'): cannot differentiate 'score ** score': an exponent that depends"),
    ("cumsum(score, 1)", None, "grad(score_mod, 'score'): cannot differentiate 'cumsum'"),
    ("score", ("grad(score_mod, \"score\")(", "grad(score_mod, \"depth\")("),
     "grad(score_mod, 'depth'): score_mod takes (score, row, col); give an index from 0 to 2 or one of those names"),
    ("score", ("grad(score_mod, \"score\")(", "grad(no_hook, 0)("), "grad() takes a hook and the index or name"),
])
def test_what_cannot_be_differentiated_is_one_sentence(tmp_path, body, program, message):
    path = _spec(tmp_path, body, None)
    if program:
        base = tmp_path / "score_grad.yaml"
        base.write_text(base.read_text().replace(*program))
    with pytest.raises(SpecError) as err:
        build_variant(load_spec(path), {}, load_target("sm_90"), compile=False)
    assert message in str(err.value) and ".yaml:" in str(err.value)
