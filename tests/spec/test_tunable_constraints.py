"""Constraints that name tunables pick the tunable choices of each variant (kgen.build
.tunable_candidates); the call-time check skips them (it knows sizes, not tunables)."""
from pathlib import Path

import pytest
import torch

import kgen
from kgen.build import tunable_candidates
from kgen.errors import SpecError
from kgen.spec.load import load_spec

SPEC = """\
kgen: 1
name: chunked
summary: constraints on tunables
variants:
  chunk: [32, 64, 128]
sizes: [N]
tensors:
  x: {shape: [N], dtype: fp32}
  y: {shape: [N], dtype: fp32, role: output}
constraints: ["chunk % BLOCK == 0", "N > 0"]
tunables: {BLOCK: [128, 64], WARPS: 4}
kernels:
  - name: main
    grid: cdiv(N, BLOCK)
    warps: WARPS
    program: |
      r = block(program_id(0), BLOCK)
      store(y[r], load(x[r]) * 2.0)
reference: |
  y = x * 2
"""


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "chunked.yaml"
    path.write_text(SPEC)
    return path


def test_each_variant_gets_the_tunables_its_constraints_allow(spec_file):
    ls = load_spec(spec_file)
    assert tunable_candidates(ls, {"chunk": 128}) == [{"BLOCK": 128, "WARPS": 4}, {"BLOCK": 64, "WARPS": 4}]
    assert tunable_candidates(ls, {"chunk": 64}) == [{"BLOCK": 64, "WARPS": 4}]
    with pytest.raises(SpecError, match=r"no tunable choice of variant \{'chunk': 32\} meets the constraints chunk % BLOCK == 0"):
        tunable_candidates(ls, {"chunk": 32})


def test_the_call_checks_only_the_size_constraints(spec_file):
    op = kgen.load(spec_file)
    x = torch.randn(100)
    torch.testing.assert_close(op(x, chunk=64), x * 2)


def _with(spec_file: Path, old: str, new: str) -> Path:
    spec_file.write_text(SPEC.replace(old, new))
    return spec_file


def test_preferences_reorder_a_variants_candidates_and_keep_them_all(spec_file):
    _with(spec_file, "tunables: {BLOCK: [128, 64], WARPS: 4}",
          'prefer: ["BLOCK == 32 and chunk == 64", "BLOCK == 64"]\ntunables: {BLOCK: [128, 64, 32], WARPS: 4}')
    ls = load_spec(spec_file)
    # chunk 128: the first condition holds for none, the second moves 64 ahead; none is dropped
    assert [c["BLOCK"] for c in tunable_candidates(ls, {"chunk": 128})] == [64, 128, 32]
    assert [c["BLOCK"] for c in tunable_candidates(ls, {"chunk": 64})] == [32, 64]
    assert [c["BLOCK"] for c in tunable_candidates(ls, {"chunk": 32})] == [32]


@pytest.mark.parametrize("prefer", ['"N > 4 and BLOCK == 64"', '"chunk == 64"'])
def test_a_preference_without_tunables_or_with_sizes_is_refused(spec_file, prefer):
    _with(spec_file, "tunables:", f"prefer: [{prefer}]\ntunables:")
    with pytest.raises(SpecError, match=r"chunked.yaml:\d+:\d+: .*must name tunables and no sizes"):
        load_spec(spec_file)


HOOKED = SPEC.replace("reference:", """hooks:
  scale:
    args: [v, i]
    body: v
reference:""")


def test_a_preference_may_ask_whether_a_hook_is_the_identity(spec_file):
    ask = 'prefer: ["BLOCK == 64 and is_identity(scale, 0)"]\ntunables:'
    spec_file.write_text(HOOKED.replace("tunables:", ask))
    assert [c["BLOCK"] for c in tunable_candidates(load_spec(spec_file), {"chunk": 128})] == [64, 128]
    spec_file.write_text(HOOKED.replace("tunables:", ask).replace("body: v", "body: v * 2.0"))
    assert [c["BLOCK"] for c in tunable_candidates(load_spec(spec_file), {"chunk": 128})] == [128, 64]
    # by name as by position; a body that is another argument is not the identity of v
    spec_file.write_text(HOOKED.replace("tunables:", ask.replace("scale, 0", "scale, 'v'")).replace("body: v", "body: i"))
    assert [c["BLOCK"] for c in tunable_candidates(load_spec(spec_file), {"chunk": 128})] == [128, 64]


def test_a_preference_may_count_the_transcendental_calls_of_a_hook(spec_file):
    ask = 'prefer: ["BLOCK == 64 and transcendentals(scale) == 0"]\ntunables:'
    order = lambda body: [c["BLOCK"] for c in tunable_candidates(load_spec(_hooked(spec_file, ask, body)), {"chunk": 128})]
    assert order("v * 2.0 + abs(v)") == [64, 128]  # arithmetic, abs: the FMA pipes
    assert order("2.0 * tanh(v / 2.0)") == [128, 64]
    # a body of statements, and the calls of another hook it makes, count as well
    assert order("|\n      w = exp2(v)\n      return w") == [128, 64]
    two = 'prefer: ["BLOCK == 64 and transcendentals(scale) == 2"]\ntunables:'
    text = HOOKED.replace("tunables:", two).replace("body: v", "body: sigmoid(v) * half(v)").replace(
        "hooks:\n", "hooks:\n  half:\n    args: [x]\n    body: exp(x)\n")
    spec_file.write_text(text)
    assert [c["BLOCK"] for c in tunable_candidates(load_spec(spec_file), {"chunk": 128})] == [64, 128]


def _hooked(spec_file, ask, body):
    spec_file.write_text(HOOKED.replace("tunables:", ask).replace("body: v", f"body: {body}"))
    return spec_file


@pytest.mark.parametrize("ask, message", [
    ("transcendentals(scale, 0) == 0", r"transcendentals\(\) takes one hook, as transcendentals\(score_mod\)"),
    ("transcendentals(shift) == 0", "'shift' is not a hook of the spec; hooks: scale"),
    ("is_identity(shift, 0)", "'shift' is not a hook of the spec; hooks: scale"),
    ("is_identity(scale, 2)", r"scale takes \(v, i\); name one of them or its index"),
    ("is_identity(scale)", r"is_identity\(\) takes a hook and the index or name of one of its arguments"),
])
def test_hook_questions_name_a_hook_and_what_they_take(spec_file, ask, message):
    spec_file.write_text(HOOKED.replace("tunables:", f'prefer: ["BLOCK == 64 and {ask}"]\ntunables:'))
    with pytest.raises(SpecError, match=r"chunked.yaml:\d+:\d+: prefer.0: .*" + message):
        load_spec(spec_file)


def test_is_identity_is_asked_only_in_preferences(spec_file):
    spec_file.write_text(HOOKED.replace('"N > 0"', '"N > 0", "BLOCK == 64 or is_identity(scale, 0)"'))
    with pytest.raises(SpecError, match=r"is_identity\(\) is asked only in prefer:"):
        load_spec(spec_file)
