"""The tuning database shipped in kgen/hw/data/tuning (kgen/runtime/tuning.py): every entry is
keyed by its spec as the spec is now (its text, a variant it has, the target's descriptor and the
size bucket) and names one of the variant's candidates, so that an edited spec or descriptor
whose shipped tune no call would find any more fails here instead of silently running the
untuned default; and the runtime prefers each entry's choice."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgen.build import tunable_candidates
from kgen.hw.descriptor import load_target
from kgen.runtime.tuning import SHIPPED, preferred, tuning_key
from kgen.spec.load import load_spec, variant_id

SPECS = Path(__file__).resolve().parents[2] / "specs"
ENTRIES = [(path.stem, key, e) for path in sorted(SHIPPED.glob("*.json"))
           for key, e in json.loads(path.read_text())["entries"].items()]


def test_the_h200_defaults_are_shipped():
    assert any(target == "sm_90" for target, _, _ in ENTRIES)


@pytest.mark.parametrize("target, key, entry", ENTRIES, ids=[f"{e['spec']}-{e['variant']}-{e['bucket']}" for _, _, e in ENTRIES])
def test_each_entry_is_keyed_by_the_spec_as_it_is(target, key, entry, monkeypatch, tmp_path):
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path))  # no local database over the shipped one
    ls = load_spec(SPECS / f"{entry['spec']}.yaml")
    variant = next((v for v in ls.variants() if variant_id(v) == entry["variant"]), None)
    assert variant is not None, f"{entry['spec']} has no variant {entry['variant']} any more"
    t = load_target(target)
    assert entry["target"] == target
    assert tuning_key(ls, variant, t, entry["sizes"]) == key, (
        f"{entry['spec']} ({entry['variant']}, {target}) changed since its shipped tune: run kgen tune on the "
        f"H200 again and copy its entries into {SHIPPED.name}/{target}.json")
    assert entry["tunables"] in tunable_candidates(ls, variant)
    assert preferred(ls, variant, t, entry["sizes"]) == entry["tunables"]
