"""The cache key of a compiled variant changes with everything that changes its code object:
kgen's passes, emitter, templates, headers and descriptors, and the descriptor in hand."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kgen.hw.descriptor import load_target
from kgen.runtime import compiled, fingerprint
from kgen.runtime.cache import Cache, cache_key
from kgen.spec.load import load_spec

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tree(tmp_path):
    """A copy of kgen's package and templates, as the fingerprint reads them."""
    shutil.copytree(fingerprint.PACKAGE, tmp_path / "kgen", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "templates", tmp_path / "templates")
    return tmp_path


def digest(tree: Path) -> str:
    return fingerprint.tree_digest([("kgen", tree / "kgen", fingerprint.NOT_HASHED), ("templates", tree / "templates", ())])


@pytest.mark.parametrize("edit", ["kgen/ir/passes/memory.py", "kgen/codegen/emit.py", "kgen/toolchain/cuda.py",
                                  "kgen/hw/data/sm_90.yaml", "templates/common/ops.j2", "templates/cuda/kgen_cuda.h",
                                  "templates/hip/kgen_hip.h"])
def test_editing_what_reaches_a_code_object_changes_the_fingerprint(tree, edit):
    before = digest(tree)
    path = tree / edit
    path.write_bytes(path.read_bytes() + b"\n")
    assert digest(tree) != before


@pytest.mark.parametrize("edit", ["kgen/bench/attention.py", "kgen/ops/attention.py", "kgen/cli.py"])
def test_editing_what_only_runs_around_the_compiler_does_not(tree, edit):
    before = digest(tree)
    path = tree / edit
    path.write_bytes(path.read_bytes() + b"\n")
    assert digest(tree) == before


def test_the_fingerprint_is_this_checkout(tree):
    assert fingerprint.kgen_fingerprint() == digest(tree)[:32]


def _key(monkeypatch, target, **parts):
    monkeypatch.setattr("kgen.backends.compiler_identity", lambda backend: f"{backend} stand-in 1.0")
    ls = load_spec(REPO / "specs" / "softmax.yaml")
    return cache_key({**compiled.key_parts(ls, {"dtype": "bf16"}, target), **parts})


def test_a_doctored_descriptor_is_another_key(monkeypatch):
    real = load_target("sm_90")
    small = real.model_copy(update={"lds_bytes_per_block": 1024})
    frugal = real.model_copy(update={"frugal_register_flags": ()})
    keys = {_key(monkeypatch, t) for t in (real, small, frugal)}
    assert len(keys) == 3
    assert _key(monkeypatch, real) == _key(monkeypatch, load_target("H200"))  # the same facts, the same key


def test_a_changed_source_never_loads_the_stale_entry(monkeypatch, tmp_path):
    """An entry built under one fingerprint is not what a key with another one finds."""
    cache = Cache(tmp_path)
    target = load_target("gfx942")
    old = _key(monkeypatch, target)
    cache.get_or_build(old, lambda d: (d / "obj.hsaco").write_bytes(b"old code"))
    monkeypatch.setattr(compiled, "kgen_fingerprint", lambda: "0" * 32)
    new = _key(monkeypatch, target)
    assert new != old and cache.get(new) is None and cache.get(old) is not None
