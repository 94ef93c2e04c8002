"""`tensor_grads(hook, g)(args)`: the gradient of the tensors a hook loads, on
tests/lang/specs/tensor_grads.yaml (a scale per row, summed along it, and a bias per element,
scattered), against the spec's reference (torch.autograd through the same hook) and a sum written
out here, on the CPU interpreter; rendered for both targets; then the errors."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for helpers
import helpers  # noqa: E402

from kgen.build import build_variant  # noqa: E402
from kgen.errors import SpecError  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

BASE = HERE / "specs" / "tensor_grads.yaml"
M, N = 9, 200  # neither a multiple of the 4 x 128 tile


def test_the_loaded_tensors_gradients_match_autograd_and_the_sum():
    ls = load_spec(BASE)
    gen = torch.Generator().manual_seed(2)
    ins = {"x": torch.randn(M, N, generator=gen), "s": torch.randn(M, generator=gen), "bias": torch.randn(M, N, generator=gen)}
    got = helpers.run_spec_cpu(ls, {}, dict(ins), {"M": M, "N": N}, {})
    helpers.check_outputs(ls, got, ins, {}, {})
    x = ins["x"].double()
    torch.testing.assert_close(got["ds"].double(), (x * x).sum(1), rtol=1e-5, atol=1e-5)  # d/ds of score * s, g = x
    torch.testing.assert_close(got["dbias"].double(), 2 * ins["bias"].double() * x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_it_renders_a_row_sum_add_and_a_scatter_add(target):
    (k,) = build_variant(load_spec(BASE), {}, load_target(target), compile=False).kernels
    assert "t_ds" in k.text and "t_dbias" in k.text and k.text.count("atomic_add") >= 2


def _derived(tmp_path: Path, body: str, program: tuple[str, str] | None = None) -> Path:
    base = tmp_path / "tensor_grads.yaml"
    text = BASE.read_text()
    base.write_text(text.replace(*program) if program else text)
    path = tmp_path / "derived.yaml"
    path.write_text("kgen: 1\nextends: tensor_grads.yaml\nname: derived\nsummary: s\nhooks:\n  score_mod: |\n"
                    + "".join(f"    {line}\n" for line in body.splitlines()))
    return path


@pytest.mark.parametrize("body, program, message", [
    ("score + load(bias[row, col]) ** load(s[row])", None,
     "tensor_grads(score_mod): cannot differentiate 'load(bias[row, col]) ** load(s[row])': an exponent that depends on the argument"),
    ("score", ("tensor_grads(score_mod, t)(", "tensor_grads(nothing, t)("),
     "tensor_grads() takes a hook and the gradient of its result: tensor_grads(score_mod, ds)(args...); hooks: score_mod"),
])
def test_what_cannot_be_differentiated_is_one_sentence(tmp_path, body, program, message):
    with pytest.raises(SpecError) as err:
        build_variant(load_spec(_derived(tmp_path, body, program)), {}, load_target("sm_90"), compile=False)
    assert message in str(err.value) and ".yaml:" in str(err.value)


def test_a_gradient_load_in_a_called_hook_is_refused(tmp_path):
    base = tmp_path / "tensor_grads.yaml"
    base.write_text(BASE.read_text().replace("hooks:\n", "hooks:\n  shift:\n    args: [row]\n    body: load(s[row])\n", 1))
    path = tmp_path / "derived.yaml"
    path.write_text("kgen: 1\nextends: tensor_grads.yaml\nname: derived\nsummary: s\nhooks:\n  score_mod: score + shift(row)\n")
    with pytest.raises(SpecError) as err:
        build_variant(load_spec(path), {}, load_target("sm_90"), compile=False)
    assert "hook shift, which score_mod calls, loads 's', whose gradient this spec writes; write that load in score_mod itself" in str(err.value)
