"""kgen.ops.ring.ring_flash_attn_func (context-parallel attention over a torch.distributed ring):
two or three ranks (gloo, CPU tensors through the interpreter) each hold a zigzag slice of one sequence;
the output and gradients, gathered, match attention on the whole sequence in float64 within
twice PyTorch's own bf16 error. The two-GPU form (nccl) runs where two GPUs are."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import attention_ref  # noqa: E402
import helpers  # noqa: E402

B, S, H, HKV, D = 1, 96, 4, 2, 32


def _whole(seed: int):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, H, D, generator=g).to(torch.bfloat16)
    k, v = (torch.randn(B, S, HKV, D, generator=g).to(torch.bfloat16) for _ in range(2))
    dout = torch.randn(B, S, H, D, generator=g).to(torch.bfloat16)
    return q, k, v, dout


def _rank(rank: int, world: int, init: str, causal: bool, device: str, backend: str, out_path: str) -> None:
    from kgen.ops.ring import ring_flash_attn_func, zigzag_shard, zigzag_unshard

    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    try:
        # the zigzag slice: chunks rank and 2 world - 1 - rank of 2 x world
        chunk = S // (2 * world)
        mine = zigzag_shard(torch.arange(S).view(1, S, 1)).flatten().tolist()
        assert mine == [*range(rank * chunk, (rank + 1) * chunk),
                        *range((2 * world - 1 - rank) * chunk, (2 * world - rank) * chunk)], (rank, mine)
        if device == "cuda":
            torch.cuda.set_device(rank)
            device = f"cuda:{rank}"
        q, k, v, dout = (zigzag_shard(t).to(device) for t in _whole(3))
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        o = ring_flash_attn_func(*leaves, causal=causal)
        grads = torch.autograd.grad(o, leaves, dout)
        whole = [zigzag_unshard(t.detach()).cpu() for t in (o, *grads)]
        if rank == 0:
            torch.save(whole, out_path)
    finally:
        dist.destroy_process_group()


def _run(tmp_path: Path, causal: bool, device: str, backend: str, world: int = 2) -> None:
    out_path = tmp_path / "whole.pt"
    mp.spawn(_rank, args=(world, f"file://{tmp_path / 'init'}", causal, device, backend, str(out_path)), nprocs=world)
    got = torch.load(out_path)
    q, k, v, dout = _whole(3)
    exact = attention_ref.with_grads(q, k, v, dout, causal, torch.float64)
    low = attention_ref.with_grads(q, k, v, dout, causal, None)
    for name, g, r, lo in zip(("out", "dq", "dk", "dv"), got, exact, low):
        helpers.check_close(name, g, r, lo)


# three ranks: an odd world, whose zigzag slices and ring of three steps two ranks do not show
@pytest.mark.parametrize("causal, world", [(False, 2), (True, 3)])
def test_ranks_on_the_cpu_match_whole_sequence_attention(tmp_path, causal, world):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    _run(tmp_path, causal, "cpu", "gloo", world)


def test_errors_are_one_sentence():
    from kgen.errors import LaunchError
    from kgen.ops.ring import ring_flash_attn_func

    q = torch.randn(1, 7, 2, 32).to(torch.bfloat16)
    with pytest.raises(LaunchError) as e:
        ring_flash_attn_func(q, q, q, causal=True)
    assert str(e.value) == ("ring_flash_attn_func: causal attention takes the zigzag slices (zigzag_shard), two equal "
                            "chunks per rank; this rank holds 7 positions")
    with pytest.raises(LaunchError) as e:
        ring_flash_attn_func(q[:, :6], q[:, :6], q[:, :6])
    assert str(e.value) == ("ring_flash_attn_func: torch.distributed is not initialized; call "
                            "torch.distributed.init_process_group first")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("causal", [False, True])
def test_two_gpus(tmp_path, causal):
    _run(tmp_path, causal, "cuda", "nccl")


