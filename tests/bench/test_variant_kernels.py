"""kgen.bench.variant_kernels: the CUDA time of each kernel a forward and backward launch."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import helpers  # noqa: E402


@pytest.mark.gpu
@pytest.mark.skipif(helpers.no_gpu_reason() is not None, reason=str(helpers.no_gpu_reason()))
def test_each_kernel_of_the_causal_backward_is_timed():
    import torch

    from kgen.bench.variant_kernels import kernel_times
    from kgen.ops import flash_attn_func

    q, k, v = (torch.randn(1, 256, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn_like(q)
    times = kernel_times(lambda *a: flash_attn_func(*a, causal=True), (q, k, v), dout, rounds=2)
    names = " ".join(times)
    for kernel in ("fa2_fwd", "fa2_bwd_dkdv", "fa2_bwd_dq", "fa2_bwd_delta"):
        assert kernel in names
    assert all(ms > 0 for ms in times.values())


@pytest.mark.skipif(helpers.no_gpu_reason() is None, reason="a GPU is visible")
def test_without_a_gpu_it_says_so_in_one_sentence(monkeypatch):
    from kgen.bench import variant_kernels

    monkeypatch.setattr("sys.argv", ["variant_kernels"])
    with pytest.raises(SystemExit, match=r"^kgen.bench.variant_kernels times kernels on a CUDA GPU, and torch sees none$"):
        variant_kernels.main()
