"""`kgen check SPEC --target gfx942 --emulate` on every variant of every shipped spec: its gfx942
kernels, as `kgen build` writes them, run in the wave64 emulation on the check's ragged sizes
against the spec's reference, with the memory and race checks on. One variant per test (the
command's --variant selects it), so that pytest-xdist spreads the 124 over the cores. The build
it runs is the one that ships: tests/test_build.py, test_gfx942_builds_need_no_compile."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from test_cli import kgen  # noqa: E402

from kgen.spec.load import load_spec, variant_id  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


# values of open variant axes (open_variants), which the listed variants do not cover: one
# padded head_dim per attention spec, each dtype once
OPEN = [("fa2_fwd.yaml", {"dtype": "fp16", "head_dim": 96, "causal": True}),
        ("fa2_bwd.yaml", {"dtype": "bf16", "head_dim": 40, "causal": True, "deterministic": False}),
        ("fa2_bwd.yaml", {"dtype": "fp16", "head_dim": 96, "causal": False, "deterministic": True})]


def _cases():
    for path in sorted((REPO / "specs").glob("*.yaml")):
        for variant in load_spec(path).variants():
            yield pytest.param(path, variant, id=f"{path.stem}-{variant_id(variant)}")
    for name, variant in OPEN:
        yield pytest.param(REPO / "specs" / name, variant, id=f"{Path(name).stem}-{variant_id(variant)}")


@pytest.mark.parametrize("path, variant", list(_cases()))
def test_kgen_check_passes_in_emulation(capsys, path, variant):
    selected = [a for axis, value in variant.items() for a in ("-v", f"{axis}={str(value).lower()}")]
    code, out, err = kgen(capsys, "check", str(path), "--target", "gfx942", "--emulate", "-j", "1", *selected)
    assert code == 0, err
    assert "1 of 1 variants passed" in err, err

