"""A content-addressed on-disk cache of build outputs (code objects, the launcher extension).

Layout under the root (``KGEN_CACHE_DIR``, else the platform's user cache directory for 'kgen')::

    entries/<key[:2]>/<key>/   one finished entry: the build's files and a manifest.json
    locks/<key>.lock           a file lock, held while <key> is being built
    tmp/<key>.XXXX/            a build in progress; renamed into entries/ when it succeeds
    trash/                     corrupt entries moved aside before they are deleted

An entry is intact when its ``manifest.json`` parses, holds its own key, every field its builder
requires (``required``: a compiled variant's ``kernels`` and ``tunables``) and a ``files`` map
(relative path -> sha256) whose every file exists with that hash; anything else is corrupt and is
rebuilt. A build folder left in tmp/ by a killed process is removed by the next build that finds
it more than an hour old (STALE_TMP_SECONDS). The warm path (`Cache.get_or_build` on an intact
entry) takes no lock and imports nothing heavy: ``filelock`` (tens of ms to import) is imported only
when something has to be built.

A build writes into a fresh folder under tmp/ on the same filesystem and the finished folder is
renamed into place in one step, so a reader sees either no entry or a whole one, never half of one.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from ..errors import KgenError
from ..knobs import knobs

MANIFEST = "manifest.json"
STALE_TMP_SECONDS = 3600  # no build of one variant takes an hour; an older tmp/ folder was orphaned
_KEY_CHARS = frozenset("0123456789abcdef")


def cache_root() -> Path:
    """The cache's root: ``KGEN_CACHE_DIR`` if set, else platformdirs' user cache dir for 'kgen'."""
    configured = knobs().cache_dir
    if configured is not None:
        return configured
    import platformdirs  # only when no KGEN_CACHE_DIR is set

    return Path(platformdirs.user_cache_dir("kgen"))


def cache_key(parts: dict[str, Any]) -> str:
    """The first 32 hex digits of the sha256 of the canonical JSON of `parts`.

    Callers pass everything that changes the output: spec variant, target, kgen version, template
    hashes, compiler identity and flags. Keys are sorted and whitespace is fixed, so two equal dicts
    give the same key whatever their order; Paths and other non-JSON values are written as str().
    """
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_manifest(entry: Path) -> dict[str, Any]:
    """The parsed manifest.json of an entry (raises OSError / ValueError if missing or corrupt)."""
    with open(Path(entry) / MANIFEST, "rb") as f:
        manifest = json.loads(f.read())
    if not isinstance(manifest, dict):
        raise ValueError(f"{Path(entry) / MANIFEST} is not a JSON object")
    return manifest


def _is_intact(entry: Path, key: str, required: tuple[str, ...] = ()) -> bool:
    try:
        manifest = read_manifest(entry)
        files = manifest.get("files")
        if not isinstance(files, dict) or manifest.get("key") != key or any(f not in manifest for f in required):
            return False
        for name, digest in files.items():
            if file_sha256(entry / name) != digest:
                return False
    except (OSError, ValueError):
        return False
    return True


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


class Cache:
    """A content-addressed cache rooted at `root` (default: `cache_root()`)."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else cache_root()

    def info(self) -> dict[str, Any]:
        """What the cache holds: its root, the number of entries and the bytes of each part."""
        entries = [e for d in (self.root / "entries").glob("??") for e in d.iterdir()] if (self.root / "entries").is_dir() else []
        parts = {name: _tree_bytes(self.root / name) if (self.root / name).is_dir() else 0
                 for name in ("entries", "tmp", "trash")}
        return {"root": str(self.root), "entries": len(entries), "bytes": sum(parts.values()), **{f"{k}_bytes": v for k, v in parts.items()}}

    def clear(self) -> int:
        """Remove every entry and leftover build folder; the number of entries removed. A process
        that has an entry's code objects loaded keeps them (they are read into memory on load)."""
        count = self.info()["entries"]
        for name in ("entries", "tmp", "trash", "locks"):
            if (self.root / name).exists():
                aside = self.root / f".{name}-cleared-{uuid.uuid4().hex[:8]}"
                os.rename(self.root / name, aside)  # one step, so no reader sees half an entry
                _remove_tree(aside)
        return count

    def entry_path(self, key: str) -> Path:
        if len(key) < 2 or not set(key) <= _KEY_CHARS:
            raise KgenError(f"cache key {key!r} is not a lowercase hex digest (make one with cache_key())")
        return self.root / "entries" / key[:2] / key

    def get(self, key: str, required: tuple[str, ...] = ()) -> Path | None:
        """The entry for `key` if it exists and is intact, else None (no lock, no build)."""
        entry = self.entry_path(key)
        return entry if _is_intact(entry, key, required) else None

    def get_or_build(self, key: str, build: Callable[[Path], None], required: tuple[str, ...] = ()) -> Path:
        """The entry folder for `key`, calling `build(tmpdir)` once (across processes) if needed.

        `build` writes its files into the empty folder it is given; it may write its own
        manifest.json, whose keys are kept (the cache sets its "files" map). If `build` raises,
        nothing is left in entries/ or tmp/ (unless KGEN_KEEP_TEMPS=1 keeps the tmp folder) and the
        exception propagates. An entry whose manifest lacks a field named in `required` is
        corrupt: it is rebuilt.
        """
        entry = self.entry_path(key)
        if _is_intact(entry, key, required):  # fast path: no lock, no filelock import
            return entry

        from filelock import FileLock  # slow to import: only when a build may be needed

        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with FileLock(str(locks / f"{key}.lock")):
            if _is_intact(entry, key, required):  # another process built it while we waited
                return entry
            if entry.exists() or entry.is_symlink():
                self._discard(entry)
            tmp_parent = self.root / "tmp"
            tmp_parent.mkdir(parents=True, exist_ok=True)
            self._remove_stale_tmp(tmp_parent)
            tmpdir = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=tmp_parent))
            try:
                build(tmpdir)
                self._write_manifest(tmpdir, key)
                entry.parent.mkdir(parents=True, exist_ok=True)
                os.rename(tmpdir, entry)
            except BaseException:
                if not knobs().debug_keep_temps:
                    _remove_tree(tmpdir)
                raise
        return entry

    @staticmethod
    def _remove_stale_tmp(tmp_parent: Path) -> None:
        """Remove build folders that a killed process left behind (older than STALE_TMP_SECONDS)."""
        now = time.time()
        for d in tmp_parent.iterdir():
            try:
                if now - d.stat().st_mtime > STALE_TMP_SECONDS:
                    _remove_tree(d)
            except OSError:
                pass  # another build removed it first

    def _discard(self, entry: Path) -> None:
        """Move a corrupt entry aside to trash/ (one rename), then delete it."""
        trash = self.root / "trash"
        trash.mkdir(parents=True, exist_ok=True)
        aside = trash / f"{entry.name}.{uuid.uuid4().hex[:8]}"
        os.rename(entry, aside)
        if aside.is_symlink() or aside.is_file():
            aside.unlink()
        else:
            _remove_tree(aside)

    @staticmethod
    def _write_manifest(tmpdir: Path, key: str) -> None:
        manifest_path = tmpdir / MANIFEST
        manifest: dict[str, Any] = {}
        if manifest_path.exists():
            try:
                manifest = read_manifest(tmpdir)
            except ValueError as e:
                raise KgenError(f"the build wrote a manifest.json that is not a JSON object: {e}") from e
        files: dict[str, str] = {}
        for path in sorted(tmpdir.rglob("*")):
            if path.is_file() and path != manifest_path:
                files[path.relative_to(tmpdir).as_posix()] = file_sha256(path)
        listed = manifest.get("files", {})
        if not isinstance(listed, dict):
            raise KgenError('the build wrote a manifest.json whose "files" is not an object of name -> sha256')
        missing = sorted(set(listed) - set(files))
        if missing:
            raise KgenError(f"the build's manifest.json lists files it did not write: {', '.join(missing)}")
        manifest["files"] = {**listed, **files}
        manifest["key"] = key
        data = json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8")
        with open(manifest_path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
