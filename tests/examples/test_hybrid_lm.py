"""examples/hybrid_lm.py on the CPU at a tiny size: kgen's ops (interpreter) and the peers'
(SDPA with a block-diagonal mask, PyTorch's chunked scan) from the same seed give the same
first loss and close curves; the JSON and PNG are written; bad arguments exit with one line;
under two torchrun-style CPU processes (gloo) DDP and FSDP2 average the ranks as one run would."""
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


def _torchrun_rank(rank: int, world: int, port: int, argv: list[str]) -> None:
    """One process as torchrun starts it: its rank and the rendezvous in the environment."""
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world))
    assert _example().main(argv) == 0


def _first_loss(mod, stream: int) -> float:
    """The loss of the initial weights on rank `stream`'s first row, as the training computes it."""
    import torch
    import torch.nn.functional as F

    args = mod.parse([*TINY, "--ops", "kgen"])
    torch.manual_seed(args.seed)
    model = mod.HybridLM(args.vocab, args.d_model, args.pattern, args.head_dim, args.headdim, args.d_state, args.chunk)
    ids, labels, cu, seq_idx, longest = mod.SyntheticText(args.vocab, 4, args.seed, stream=stream).packed(
        args.tokens, args.min_doc, args.max_doc)
    attention, scan, conv, _ = mod.ops("kgen", None)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ids, cu, seq_idx, longest, attention, scan, conv)
    return float(F.cross_entropy(logits.float(), labels, ignore_index=-100))


def test_ddp_and_fsdp2_on_two_cpu_ranks(tmp_path):
    """`--parallel ddp` and `fsdp` under two torchrun-style processes (gloo, kgen's ops through the
    interpreter): the first loss is the mean of the two ranks' own first losses (each rank its own
    documents, the same weights), the two wrappers train alike, and rank 0 writes the JSON."""
    import socket

    import torch.multiprocessing as mp

    runs = {}
    for parallel in ("ddp", "fsdp"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        out = tmp_path / f"{parallel}.json"
        mp.spawn(_torchrun_rank, args=(2, port, [*TINY, "--ops", "kgen", "--parallel", parallel, "--json", str(out)]),
                 nprocs=2)
        runs[parallel] = json.loads(out.read_text())
    mod = _example()
    want = (_first_loss(mod, 0) + _first_loss(mod, 1)) / 2
    ddp, fsdp = runs["ddp"], runs["fsdp"]
    assert ddp["world"] == fsdp["world"] == 2 and ddp["parallel"] == "ddp" and ddp["tokens_per_s"] > 0
    assert abs(ddp["losses"][0] - want) < 1e-3 * want and abs(fsdp["losses"][0] - want) < 1e-3 * want
    assert max(abs(a - b) for a, b in zip(ddp["losses"], fsdp["losses"])) < 2e-2 * want
