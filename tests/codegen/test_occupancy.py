"""A kernel's `occupancy` (tests/codegen/specs/occupied_rows.yaml): the programs a multiprocessor is
to hold at once. On CUDA it is __launch_bounds__'s minimum blocks, so ptxas caps a thread's
registers at the register file's share of that many programs; a kernel that then spills in every
form is kept in its least-spilling form (the spec asked for the trade; kgen tune times it), where
a kernel that did not ask gives way to the next candidate. gfx942 builds it unchanged."""
from __future__ import annotations

import re
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
from kgen.driver import compile_kernel  # noqa: E402
from kgen.errors import SpecError  # noqa: E402
from kgen.hw.descriptor import load_target  # noqa: E402
from kgen.knobs import knobs  # noqa: E402
from kgen.spec.load import load_spec  # noqa: E402

SPEC = HERE / "specs" / "occupied_rows.yaml"
VARIANT = {"dtype": "bf16", "ROW": 16384}


def _bounds(built) -> list[str]:
    (k,) = built.kernels
    return re.findall(r"__launch_bounds__\([^)]*\)", k.source + "".join(text for _, text in k.includes))


def _need(backend: str) -> None:
    if not available(backend):
        if knobs().ci:
            pytest.fail(f"CI=true but no {backend} compiler was found")
        pytest.skip(f"no {backend} compiler found")


def test_the_occupancy_asked_for_is_the_launch_bounds_minimum():
    ls, target = load_spec(SPEC), load_target("sm_90")
    assert compile_kernel(ls, 0, VARIANT, {"OCC": 2}, target).occupancy == 2
    assert _bounds(build_variant(ls, VARIANT, target, compile=False)) == ["__launch_bounds__(512, 2)"]
    # one program (the default) leaves ptxas its own choice, as before the field existed
    assert _bounds(build_variant(ls, VARIANT, target, compile=False, first={"OCC": 1})) == ["__launch_bounds__(512)"]


def test_a_kernel_that_asked_keeps_its_least_spilling_form():
    _need("cuda")
    ls, target = load_spec(SPEC), load_target("sm_90")
    two = build_variant(ls, VARIANT, target, compile=True)
    (k,) = two.kernels
    assert two.tunables == {"OCC": 2} and k.resources["registers"] <= target.regs_per_cu // (2 * 512)
    assert k.resources["spill_bytes"] > 0 and not two.rejected  # kept, spills and all
    (one,) = build_variant(ls, VARIANT, target, compile=True, first={"OCC": 1}).kernels
    assert one.resources["registers"] > target.regs_per_cu // (2 * 512) and one.resources["spill_bytes"] == 0


def test_gfx942_builds_and_computes_it():
    _need("hip")
    ls = load_spec(SPEC)
    (k,) = build_variant(ls, VARIANT, load_target("gfx942"), compile=True).kernels
    assert k.resources["spill_bytes"] == 0
    op = kgen.load(SPEC, target="gfx942", emulate=True)
    x, w, b = torch.randn(3, 5000).bfloat16(), torch.randn(5000).bfloat16(), torch.randn(5000).bfloat16()
    helpers.check_outputs(ls, {"y": op(x, w, b)}, {"x": x, "w": w, "b": b}, {"eps": 1e-5}, VARIANT)


@pytest.mark.parametrize("value, message", [
    ("0", "occupancy must be a positive integer (programs a multiprocessor holds at once), got 0"),
    ("OCCS", "occupancy must be a positive integer or an expression of the variant axes and tunables; 'OCCS' could not"),
])
def test_a_bad_occupancy_is_an_error_at_its_line(tmp_path, value, message):
    text = SPEC.read_text().replace("occupancy: OCC", f"occupancy: {value}")
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(SpecError) as e:
        compile_kernel(load_spec(tmp_path / "bad.yaml"), 0, VARIANT, {"OCC": 2}, load_target("sm_90"))
    line = text.splitlines().index(f"    occupancy: {value}") + 1
    assert f"bad.yaml:{line}:" in str(e.value) and message in str(e.value)


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
def test_the_spilling_form_computes_what_the_reference_does():
    """Two programs a multiprocessor, spills and all, on the GPU: fresh inputs, a ragged row
    (14000 of 16384 columns), against float64 within twice bf16's own error."""
    op = kgen.load(SPEC)
    x = torch.randn(37, 14000, device="cuda").bfloat16()
    w, b = torch.randn(14000, device="cuda").bfloat16(), torch.randn(14000, device="cuda").bfloat16()
    y = op(x, w, b)
    assert op.last_tunables == {"OCC": 2}
    helpers.check_outputs(load_spec(SPEC), {"y": y.cpu()}, {"x": x.cpu(), "w": w.cpu(), "b": b.cpu()}, {"eps": 1e-5}, VARIANT)
