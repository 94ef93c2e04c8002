"""examples/hybrid_lm.py on the CPU at a tiny size: kgen's ops (interpreter) and the peers'
(SDPA with a block-diagonal mask, PyTorch's chunked scan) from the same seed give the same
first loss and close curves; the JSON and PNG are written; bad arguments exit with one line."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hybrid_lm.py"
TINY = ["--tokens", "160", "--min-doc", "20", "--max-doc", "90", "--pattern", "MA", "--d-model", "64",
        "--head-dim", "32", "--headdim", "64", "--d-state", "16", "--chunk", "64", "--vocab", "64",
        "--steps", "3", "--warmup", "1", "--quiet", "--device", "cpu"]


def _example():
    spec = importlib.util.spec_from_file_location("hybrid_lm", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_kgen_and_peers_train_alike(tmp_path):
    mod = _example()
    runs = {}
    for ops in ("peers", "kgen"):
        out = tmp_path / f"{ops}.json"
        extra = ["--compare", str(tmp_path / "peers.json"), "--png", str(tmp_path / "loss.png")] if ops == "kgen" else []
        assert mod.main([*TINY, "--ops", ops, "--json", str(out), *extra]) == 0
        runs[ops] = json.loads(out.read_text())
    a, b = runs["peers"]["losses"], runs["kgen"]["losses"]
    assert len(a) == len(b) == 3 and all(x == x for x in a + b)
    assert abs(a[0] - b[0]) < 1e-3 * a[0]  # same weights, same documents, the same forward
    assert max(abs(x - y) for x, y in zip(a, b)) < 2e-2 * a[0]
    assert runs["kgen"]["tokens_per_s"] > 0 and runs["kgen"]["scan"].startswith("kgen")
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, words", [
    (["--pattern", "MX"], "--pattern takes the letters M"),
    (["--d-model", "60"], "--d-model 60 must be a multiple of --head-dim"),
    (["--ops", "kgen", "--mamba-ssm", "x"], "--mamba-ssm names the peers' scan"),
])
def test_bad_arguments_are_one_line(args, words, capsys):
    with pytest.raises(SystemExit) as e:
        _example().parse([*TINY, *args])
    assert e.value.code == 2 and words in capsys.readouterr().err
