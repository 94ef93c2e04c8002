"""A kernel whose bf16 and fp16 variants differ in that type alone is written once, for any 16-bit
float type (kgen.driver.shared_half, kgen.codegen.render.render_unit): each variant's source is a
unit that names the type and includes the shared body. The unit must compile to the very
instructions of the kernel written out for its type."""
from __future__ import annotations

from pathlib import Path

import pytest

from kgen.backends import available, backend
from kgen.bench.machine_code import instructions
from kgen.build import build_spec
from kgen.codegen.render import render_kernel
from kgen.codeobjects import compile_source
from kgen.driver import compile_kernel, display_path
from kgen.hw.descriptor import load_target
from kgen.knobs import knobs
from kgen.spec.load import load_spec

REPO = Path(__file__).resolve().parents[2]
MATMUL = REPO / "specs" / "matmul.yaml"  # variants: dtype [bf16, fp16]
SSD = REPO / "specs" / "ssd_fwd.yaml"  # variants: dtype [bf16] only


def _kernels(spec: Path, target: str):
    ls = load_spec(spec)
    built = build_spec(ls, load_target(target), ls.select_variant({}), compile=False)
    return ls, [(bv.variant, k) for bv in built for k in bv.kernels]


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_the_type_variants_share_one_body(target):
    _, kernels = _kernels(MATMUL, target)
    by_type = {v["dtype"]: k for v, k in kernels}
    bf16, fp16 = by_type["bf16"], by_type["fp16"]
    assert bf16.file != fp16.file  # one unit per type ...
    assert bf16.includes == fp16.includes and len(bf16.includes) == 1  # ... and one body
    body_file, body = bf16.includes[0]
    assert body_file.endswith(backend(load_target(target).backend).body_suffix)
    assert "kg_half" in body and "bf16" not in body and "fp16" not in body
    for dtype, k in by_type.items():
        assert f'#include "{body_file}"' in k.source and f"for {dtype}" in k.source.splitlines()[0]


def test_a_spec_with_one_type_writes_each_kernel_whole():
    _, kernels = _kernels(SSD, "sm_90")
    assert all(not k.includes and "kg_half" not in k.source for _, k in kernels)


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
def test_a_unit_compiles_to_the_instructions_of_its_kernel_written_out(target, tmp_path):
    tg = load_target(target)
    if not available(tg.backend):
        if knobs().ci:
            pytest.fail(f"CI=true but no {tg.backend} compiler was found")
        pytest.skip(f"no {tg.backend} compiler found")
    ls = load_spec(MATMUL)
    for bv in build_spec(ls, tg, ls.select_variant({}), compile=False):
        for index, k in enumerate(bv.kernels):  # a variant's kernels in the spec's order
            kernel = compile_kernel(ls, index, bv.variant, bv.tunables, tg, options=k.options)
            whole = render_kernel(kernel, tg, spec_file=display_path(ls.path), program_line=1, variant=bv.variant)
            assert "kg_half" not in whole and k.includes
            shared = compile_source(k.source, k.file, tg, includes=k.includes)
            written_out = compile_source(whole, "whole" + backend(tg.backend).source_suffix, tg)
            assert _instructions(shared, k.name, tmp_path) == _instructions(written_out, k.name, tmp_path), \
                f"{k.file} ({bv.id}) compiles to other instructions than its kernel written out"


def _instructions(obj, kernel: str, tmp_path: Path) -> bytes:
    path = tmp_path / f"{kernel}.o"
    path.write_bytes(obj.binary)
    return instructions(path, kernel)
