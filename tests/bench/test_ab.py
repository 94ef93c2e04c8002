"""kgen.bench.ab: the A/B of two builds swaps the ops' compiled variants; the B side passes on
what the op asks for (the tuning database's choice, `first`), as kgen.runtime.plan calls it."""
import json

from kgen.bench import ab
from kgen.runtime import compiled


def test_the_b_side_builds_with_the_candidate_the_op_asks_first(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(compiled, "compiled_variant", lambda ls, variant, target, first=None: calls.append(first) or "B")
    before = tmp_path / "entries.json"
    before.write_text(json.dumps({}))
    use = ab.sides(before)
    use("B")
    assert compiled.compiled_variant(None, {}, None, {"BLOCK_M": 64}) == "B"
    assert calls == [{"BLOCK_M": 64}]
