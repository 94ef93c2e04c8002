"""The tuning database: which tunables won when `kgen tune` timed a spec's candidates on a GPU,
per variant, target and size bucket, and the runtime's lookup of it.

An entry's key is the spec's text, the variant, the target's name and descriptor, and the size
bucket: each size rounded up to a power of two (as Triton's autotune keys its cache by the
arguments named in key=), so one tune serves the sizes near the ones timed. kgen's own source is
not in the key (unlike the build cache): a tune measures the candidates, and a changed compiler
still builds the same candidates; `kgen tune --show` lists every entry with the time of the
winner against the first fitting candidate, the one used without a tune.

Entries live in <cache dir>/tuning.json (written by `kgen tune`); the repository ships defaults
measured on the H200 in kgen/hw/data/tuning/<target>.json, read after the local file.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ..hw.descriptor import Target
from ..spec.load import LoadedSpec, variant_id
from .cache import cache_root

SHIPPED = Path(__file__).resolve().parent.parent / "hw" / "data" / "tuning"


def size_bucket(sizes: dict[str, int]) -> dict[str, int]:
    """Each size rounded up to a power of two (at least 1)."""
    return {n: 1 << max(int(v) - 1, 0).bit_length() for n, v in sorted(sizes.items())}


def tuning_key(ls: LoadedSpec, variant: dict[str, Any], target: Target, sizes: dict[str, int]) -> str:
    from .compiled import descriptor_digest

    parts = {"spec": hashlib.sha256(ls.yaml.text.encode()).hexdigest(), "variant": variant_id(variant),
             "target": target.name, "descriptor": descriptor_digest(target), "bucket": size_bucket(sizes)}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def local_path() -> Path:
    return cache_root() / "tuning.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data.get("entries", {}) if isinstance(data, dict) else {}


def entries(target: str | None = None) -> dict[str, dict[str, Any]]:
    """Every entry, the local file's over the shipped ones (of `target`, or of every target)."""
    out: dict[str, dict[str, Any]] = {}
    shipped = sorted(SHIPPED.glob("*.json")) if target is None else [SHIPPED / f"{target}.json"]
    for path in shipped:
        out.update({k: {**v, "source": "shipped"} for k, v in _read(path).items()})
    out.update({k: {**v, "source": "local"} for k, v in _read(local_path()).items()})
    return out


def record(key: str, entry: dict[str, Any], path: Path | None = None) -> None:
    """Write one entry into the local database (atomically: a reader never sees half a file)."""
    path = path or local_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _read(path)
    data[key] = entry
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tuning.", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"entries": data}, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def preferred(ls: LoadedSpec, variant: dict[str, Any], target: Target, sizes: dict[str, int]) -> dict[str, int] | None:
    """The tunables a tune chose for this variant, target and size bucket, if any and if they
    are still among the spec's candidates (a spec whose tunables changed has another key anyway)."""
    from ..spec.candidates import tunable_candidates

    hit = entries(target.name).get(tuning_key(ls, variant, target, sizes))
    if hit is None or hit.get("tunables") not in tunable_candidates(ls, variant):
        return None
    return dict(hit["tunables"])
