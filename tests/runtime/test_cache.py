"""The content-addressed cache: hits, failed builds, corrupt entries, concurrent builders."""
from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import pytest

from kgen.errors import KgenError
from kgen.runtime.cache import Cache, cache_key, cache_root, file_sha256, read_manifest

KEY = cache_key({"op": "test", "target": "sm_90a"})


def write_files(tmp: Path) -> None:
    (tmp / "kernel.cubin").write_bytes(b"\x7fELF fake cubin")
    (tmp / "sub").mkdir()
    (tmp / "sub" / "meta.txt").write_text("hello")


class Counter:
    """A build that counts its calls in a file (so that other processes' calls count too)."""

    def __init__(self, path: Path, delay: float = 0.0):
        self.path = path
        self.delay = delay

    def __call__(self, tmp: Path) -> None:
        with open(self.path, "a") as f:
            f.write("built\n")
        time.sleep(self.delay)
        write_files(tmp)

    @property
    def calls(self) -> int:
        return len(self.path.read_text().splitlines()) if self.path.exists() else 0


def test_cache_key_is_canonical():
    a = cache_key({"b": 1, "a": [1, 2], "c": {"y": 1, "x": 2}})
    b = cache_key({"c": {"x": 2, "y": 1}, "a": [1, 2], "b": 1})
    assert a == b and len(a) == 32 and int(a, 16) >= 0
    assert cache_key({"a": 1}) != cache_key({"a": 2})


def test_build_once_then_hit(tmp_path):
    cache = Cache(tmp_path / "c")
    build = Counter(tmp_path / "count")
    entry = cache.get_or_build(KEY, build)
    assert entry == tmp_path / "c" / "entries" / KEY[:2] / KEY
    assert (entry / "kernel.cubin").read_bytes() == b"\x7fELF fake cubin"
    manifest = read_manifest(entry)
    assert manifest["files"] == {
        "kernel.cubin": file_sha256(entry / "kernel.cubin"),
        "sub/meta.txt": file_sha256(entry / "sub" / "meta.txt"),
    }
    assert cache.get_or_build(KEY, build) == entry
    assert Cache(tmp_path / "c").get_or_build(KEY, build) == entry
    assert build.calls == 1
    assert list((tmp_path / "c" / "tmp").iterdir()) == []


def test_build_manifest_keys_are_kept(tmp_path):
    def build(tmp: Path) -> None:
        write_files(tmp)
        (tmp / "manifest.json").write_text(json.dumps({"kernel": "add", "files": {"kernel.cubin": "x"}}))

    entry = Cache(tmp_path).get_or_build(KEY, build)
    manifest = read_manifest(entry)
    assert manifest["kernel"] == "add"
    assert manifest["files"]["kernel.cubin"] == file_sha256(entry / "kernel.cubin")
    assert set(manifest["files"]) == {"kernel.cubin", "sub/meta.txt"}


def test_build_listing_missing_file_is_an_error(tmp_path):
    def build(tmp: Path) -> None:
        (tmp / "manifest.json").write_text(json.dumps({"files": {"nope.bin": "0"}}))

    with pytest.raises(KgenError, match="nope.bin"):
        Cache(tmp_path).get_or_build(KEY, build)
    assert not (tmp_path / "entries" / KEY[:2] / KEY).exists()


def test_failed_build_leaves_nothing(tmp_path):
    cache = Cache(tmp_path)

    def build(tmp: Path) -> None:
        write_files(tmp)
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="compiler crashed"):
        cache.get_or_build(KEY, build)
    entries = tmp_path / "entries"
    assert not entries.exists() or list(entries.rglob("*")) == []
    assert list((tmp_path / "tmp").iterdir()) == []
    # and a later build that works fills the entry
    build_ok = Counter(tmp_path / "count")
    assert (cache.get_or_build(KEY, build_ok) / "kernel.cubin").exists()
    assert build_ok.calls == 1


@pytest.mark.parametrize("damage", ["remove_file", "modify_file", "remove_manifest", "bad_manifest"])
def test_corrupt_entry_is_rebuilt(tmp_path, damage):
    cache = Cache(tmp_path)
    build = Counter(tmp_path / "count")
    entry = cache.get_or_build(KEY, build)
    if damage == "remove_file":
        (entry / "sub" / "meta.txt").unlink()
    elif damage == "modify_file":
        (entry / "kernel.cubin").write_bytes(b"truncated")
    elif damage == "remove_manifest":
        (entry / "manifest.json").unlink()
    else:
        (entry / "manifest.json").write_text("{not json")
    assert cache.get(KEY) is None
    assert cache.get_or_build(KEY, build) == entry
    assert build.calls == 2
    assert (entry / "kernel.cubin").read_bytes() == b"\x7fELF fake cubin"
    assert (entry / "sub" / "meta.txt").read_text() == "hello"
    assert cache.get(KEY) == entry
    assert list((tmp_path / "trash").iterdir()) == []


def _build_in_process(root: str, count: str, barrier, results) -> None:
    barrier.wait()
    entry = Cache(root).get_or_build(KEY, Counter(Path(count), delay=0.5))
    results.put(str(entry))


def test_two_processes_build_once(tmp_path):
    ctx = multiprocessing.get_context("spawn")  # fork is unsafe once torch has started threads
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    count = tmp_path / "count"
    procs = [
        ctx.Process(target=_build_in_process, args=(str(tmp_path / "c"), str(count), barrier, results))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    entries = {results.get(timeout=5) for _ in procs}
    assert entries == {str(tmp_path / "c" / "entries" / KEY[:2] / KEY)}
    assert Counter(count).calls == 1


def test_cache_dir_knob(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    entry = Cache().get_or_build(KEY, write_files)
    assert entry.is_relative_to(tmp_path / "mine")
    monkeypatch.delenv("KGEN_CACHE_DIR")
    assert cache_root() != tmp_path / "mine"


def test_bad_key_is_refused(tmp_path):
    with pytest.raises(KgenError, match="hex"):
        Cache(tmp_path).get_or_build("../../etc", write_files)


@pytest.mark.parametrize("damage", ["missing_required_field", "other_key"])
def test_manifest_without_what_the_builder_needs_is_rebuilt(tmp_path, damage):
    """A manifest that parses but lacks a field its reader needs (or holds another entry's key)
    is corrupt: rebuilt, not served."""
    cache = Cache(tmp_path)
    calls = []

    def build(tmp: Path) -> None:
        calls.append(1)
        write_files(tmp)
        (tmp / "manifest.json").write_text(json.dumps({"kernels": [], "tunables": {}}))

    entry = cache.get_or_build(KEY, build, required=("kernels", "tunables"))
    manifest = read_manifest(entry)
    if damage == "missing_required_field":
        del manifest["kernels"]
    else:
        manifest["key"] = "0" * 32
    (entry / "manifest.json").write_text(json.dumps(manifest))
    assert cache.get(KEY, required=("kernels", "tunables")) is None
    assert cache.get_or_build(KEY, build, required=("kernels", "tunables")) == entry
    assert len(calls) == 2 and "kernels" in read_manifest(entry)


def test_stale_tmp_folders_are_removed_by_the_next_build(tmp_path):
    import os

    from kgen.runtime.cache import STALE_TMP_SECONDS

    cache = Cache(tmp_path)
    (tmp_path / "tmp").mkdir()
    stale, fresh = tmp_path / "tmp" / "a.killed", tmp_path / "tmp" / "b.running"
    for d in (stale, fresh):
        d.mkdir()
        (d / "kernel.cubin").write_bytes(b"half")
    old = time.time() - STALE_TMP_SECONDS - 60
    os.utime(stale, (old, old))
    cache.get_or_build(KEY, write_files)
    assert not stale.exists()
    assert fresh.exists()  # another process may still be building into it


def test_info_and_clear(tmp_path):
    cache = Cache(tmp_path)
    assert cache.info()["entries"] == 0
    cache.get_or_build(KEY, write_files)
    cache.get_or_build(cache_key({"other": 1}), write_files)
    info = cache.info()
    assert info["entries"] == 2 and info["entries_bytes"] > 0 and info["root"] == str(tmp_path)
    assert cache.clear() == 2
    assert cache.info()["entries"] == 0 and cache.get(KEY) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == []
