"""A small hybrid language model (Mamba-2 blocks and attention blocks, as Zamba/Jamba-style
hybrids) trained on packed documents, with kgen's ops or the peers' ops.

    python examples/hybrid_lm.py --ops kgen --steps 300 --png loss_kgen.png --json kgen.json
    python examples/hybrid_lm.py --ops peers --steps 300 --png loss_peers.png --json peers.json \\
        [--mamba-ssm DIR]   # an unpacked mamba-ssm source tree (docs: ../shared/PEERS.md)
    torchrun --nproc-per-node 2 examples/hybrid_lm.py --parallel ddp   # or fsdp (FSDP2); rank 0 reports

Documents of random lengths are packed into one row of --tokens tokens per step. The attention
blocks see each document alone through cu_seqlens (kgen.ops.flash_attn_varlen_func; the peers:
PyTorch's FlashAttention-2 varlen kernel on a GPU, SDPA with a block-diagonal causal mask on the
CPU); the Mamba-2 blocks restart their state at each document through seq_idx, in their causal
convolution (kgen's causal_conv1d spec; the peers: PyTorch) and in the scan
(kgen.ops.mamba_chunk_scan_combined; the peers: mamba-ssm's, or
kgen.bench.ssd_torch's PyTorch chunked scan without --mamba-ssm). Both runs draw the same
weights and the same documents from --seed, so their loss curves can be laid over each other.
The text is a synthetic language: each token follows from the two before it by a fixed sparse
random table, so the loss can fall well below log(vocab). On a CUDA device the blocks run in
bf16 autocast with float32 weights; on the CPU, kgen's ops run its interpreter (slow: tiny
models only).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# --- data -------------------------------------------------------------------------------------


class SyntheticText:
    """Documents of a synthetic language: token t follows (t-2, t-1) by a fixed table of
    `branches` likely successors each (drawn once from the seed), with 5% uniform noise."""

    def __init__(self, vocab: int, branches: int, seed: int, stream: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.vocab, self.g = vocab, g
        self.table = torch.randint(0, vocab, (vocab, vocab, branches), generator=g)
        if stream:  # another rank's documents of the same language
            self.g.manual_seed(seed + 7919 * stream)

    def document(self, length: int) -> torch.Tensor:
        out = torch.randint(0, self.vocab, (length,), generator=self.g)
        pick = torch.randint(0, self.table.shape[2], (length,), generator=self.g)
        noise = torch.rand(length, generator=self.g) < 0.05
        for t in range(2, length):
            if not noise[t]:
                out[t] = self.table[out[t - 2], out[t - 1], pick[t]]
        return out

    def packed(self, tokens: int, min_len: int, max_len: int):
        """(tokens, labels, cu_seqlens, seq_idx, longest) for one row of `tokens` positions."""
        docs, total = [], 0
        while total < tokens:
            n = min(int(torch.randint(min_len, max_len + 1, (1,), generator=self.g)), tokens - total)
            docs.append(self.document(n))
            total += n
        ids = torch.cat(docs)
        lens = torch.tensor([len(d) for d in docs])
        cu = F.pad(lens.cumsum(0), (1, 0)).to(torch.int32)
        seq_idx = torch.repeat_interleave(torch.arange(len(docs), dtype=torch.int32), lens)
        labels = torch.full_like(ids, -100)  # the next token of the same document, none after its last
        labels[:-1] = torch.where(seq_idx[1:] == seq_idx[:-1], ids[1:], -100)
        return ids, labels, cu, seq_idx, int(lens.max())


# --- the ops: kgen's or the peers' ------------------------------------------------------------


def _mamba_ssm(tree: Path):
    pkg = types.ModuleType("mamba_ssm")  # its __init__ imports CUDA extensions that are not built
    pkg.__path__ = [str(tree / "mamba_ssm")]
    sys.modules["mamba_ssm"] = pkg
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    return mamba_chunk_scan_combined


def ops(which: str, mamba_tree: Path | None):
    """(attention(q, k, v, cu, longest), scan(x, dt, A, B, C, chunk, D, z, dt_bias, seq_idx),
    conv(x, weight, bias, seq_idx): silu of the causal convolution, names)."""
    if which == "kgen":
        from kgen.ops import flash_attn_varlen_func, mamba_chunk_scan_combined
        from kgen.ops.conv import conv_channel_last

        def attention(q, k, v, cu, longest):
            return flash_attn_varlen_func(q, k, v, cu, cu, longest, longest, causal=True)

        def scan(x, dt, A, B, C, chunk, D, z, dt_bias, seq_idx):
            return mamba_chunk_scan_combined(x, dt, A, B, C, chunk, D=D, z=z, dt_bias=dt_bias, seq_idx=seq_idx,
                                             dt_softplus=True)

        def conv(x, weight, bias, seq_idx):
            return conv_channel_last(x[None], weight, bias, seq_idx[None], True)[0]
        return attention, scan, conv, ("kgen flash_attn_varlen_func", "kgen mamba_chunk_scan_combined")

    def conv(x, weight, bias, seq_idx):
        return F.silu(causal_conv(x, weight.to(x.dtype), bias.to(x.dtype), seq_idx))

    def attention(q, k, v, cu, longest):
        if q.is_cuda:  # PyTorch's FlashAttention-2 varlen kernel (what its jagged SDPA runs)
            return torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, longest, longest, 0.0, True, False)[0]
        seq = torch.repeat_interleave(torch.arange(cu.numel() - 1), (cu[1:] - cu[:-1]).long())
        pos = torch.arange(q.shape[0])
        mask = (seq[:, None] == seq[None, :]) & (pos[None, :] <= pos[:, None])
        out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask)
        return out.transpose(0, 1)

    if mamba_tree is not None:
        peer_scan = _mamba_ssm(mamba_tree)

        def scan(x, dt, A, B, C, chunk, D, z, dt_bias, seq_idx):
            return peer_scan(x, dt, A, B, C, chunk, D=D, z=z, dt_bias=dt_bias, seq_idx=seq_idx, dt_softplus=True)
        scan_name = "mamba-ssm mamba_chunk_scan_combined"
    else:
        from kgen.bench.ssd_torch import ssd_chunked

        def scan(x, dt, A, B, C, chunk, D, z, dt_bias, seq_idx):
            y, _ = ssd_chunked(x, dt, A, B, C, chunk, D=D, dt_bias=dt_bias, dt_softplus=True, seq_idx=seq_idx,
                               dtype=torch.float32)
            return (y * F.silu(z.float())).to(x.dtype)
        scan_name = "PyTorch chunked scan (kgen.bench.ssd_torch)"
    return attention, scan, conv, ("PyTorch FA2 varlen" if torch.cuda.is_available() else "SDPA, block-diagonal mask",
                                   scan_name)


# --- the model --------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight).to(x.dtype)


def causal_conv(x, weight, bias, seq_idx):
    """Depthwise causal convolution over positions (x: (L, channels), weight: (channels, width)),
    each output reading only positions of its own document (mamba-ssm's causal_conv1d with seq_idx)."""
    out = x * weight[:, -1] + bias
    for k in range(1, weight.shape[1]):
        same = torch.zeros_like(seq_idx, dtype=torch.bool)
        same[k:] = seq_idx[k:] == seq_idx[:-k]
        shifted = F.pad(x[:-k], (0, 0, k, 0))
        out = out + torch.where(same[:, None], shifted, 0) * weight[:, -1 - k]
    return out


class Mamba2Block(nn.Module):
    """Mamba-2's mixer: in_proj to (z, x, B, C, dt), causal conv and SiLU on x, B, C, the SSD
    scan gated by z, RMSNorm, out_proj."""

    def __init__(self, d_model: int, headdim: int, d_state: int, chunk: int, expand: int = 2, d_conv: int = 4):
        super().__init__()
        self.d_inner, self.headdim, self.d_state, self.chunk = expand * d_model, headdim, d_state, chunk
        self.nheads = self.d_inner // headdim
        conv_dim = self.d_inner + 2 * d_state
        self.norm = RMSNorm(d_model)
        self.in_proj = nn.Linear(d_model, 2 * self.d_inner + 2 * d_state + self.nheads, bias=False)
        self.conv_weight = nn.Parameter(torch.randn(conv_dim, d_conv) / math.sqrt(d_conv))
        self.conv_bias = nn.Parameter(torch.zeros(conv_dim))
        dt = torch.exp(torch.rand(self.nheads) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
        self.A_log = nn.Parameter(torch.log(torch.empty(self.nheads).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(self.nheads))
        self.out_norm = RMSNorm(self.d_inner)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def forward(self, h, seq_idx, scan, conv):
        L = h.shape[0]
        z, xbc, dt = self.in_proj(self.norm(h)).split([self.d_inner, self.d_inner + 2 * self.d_state, self.nheads], -1)
        xbc = conv(xbc, self.conv_weight, self.conv_bias, seq_idx)
        x, B, C = xbc.split([self.d_inner, self.d_state, self.d_state], -1)
        y = scan(x.reshape(1, L, self.nheads, self.headdim).contiguous(), dt[None].contiguous(), -torch.exp(self.A_log),
                 B.reshape(1, L, 1, self.d_state).contiguous(), C.reshape(1, L, 1, self.d_state).contiguous(),
                 self.chunk, self.D, z.reshape(1, L, self.nheads, self.headdim).contiguous(), self.dt_bias, seq_idx[None])
        return h + self.out_proj(self.out_norm(y.reshape(L, self.d_inner)))


class AttentionBlock(nn.Module):
    """Pre-norm causal self-attention over each document, then a SwiGLU MLP."""

    def __init__(self, d_model: int, head_dim: int):
        super().__init__()
        self.heads, self.head_dim = d_model // head_dim, head_dim
        self.norm1, self.norm2 = RMSNorm(d_model), RMSNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.up = nn.Linear(d_model, 8 * d_model // 3 * 2, bias=False)
        self.down = nn.Linear(8 * d_model // 3, d_model, bias=False)

    def forward(self, h, cu, longest, attention):
        L = h.shape[0]
        q, k, v = self.qkv(self.norm1(h)).reshape(L, 3, self.heads, self.head_dim).unbind(1)
        h = h + self.proj(attention(q.contiguous(), k.contiguous(), v.contiguous(), cu, longest).reshape(L, -1))
        a, b = self.up(self.norm2(h)).chunk(2, -1)
        return h + self.down(F.silu(a) * b)


class HybridLM(nn.Module):
    def __init__(self, vocab: int, d_model: int, pattern: str, head_dim: int, headdim: int, d_state: int, chunk: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        nn.init.normal_(self.embed.weight, std=d_model ** -0.5)  # tied output: logits of unit scale
        self.blocks = nn.ModuleList(Mamba2Block(d_model, headdim, d_state, chunk) if c == "M"
                                    else AttentionBlock(d_model, head_dim) for c in pattern)
        self.norm = RMSNorm(d_model)

    def forward(self, ids, cu, seq_idx, longest, attention, scan, conv):
        h = self.embed(ids)
        for block in self.blocks:
            h = block(h, seq_idx, scan, conv) if isinstance(block, Mamba2Block) else block(h, cu, longest, attention)
        return self.norm(h) @ self.embed.weight.T.to(h.dtype)


# --- training ---------------------------------------------------------------------------------


def write_png(path: Path, curves: dict[str, list[float]]) -> None:
    """The loss curves (step on x, loss on y) as a PNG: through matplotlib where it is installed,
    else as bare lines on a white canvas (no text; the JSON holds the numbers)."""
    try:
        import matplotlib
    except ImportError:
        return _write_plain_png(path, list(curves.values()))
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for label, losses in curves.items():
        ax.plot(range(1, len(losses) + 1), losses, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40)]


def _write_plain_png(path: Path, curves: list[list[float]], w: int = 640, h: int = 360, margin: int = 20) -> None:
    import struct
    import zlib

    px = bytearray(b"\xff" * (w * h * 3))

    def dot(x: int, y: int, rgb) -> None:
        if 0 <= x < w and 0 <= y < h:
            px[3 * (y * w + x):3 * (y * w + x) + 3] = bytes(rgb)

    for x in range(margin, w - margin):  # the axes: bottom and left edges
        dot(x, h - margin, (0, 0, 0))
    for y in range(margin, h - margin + 1):
        dot(margin, y, (0, 0, 0))
    values = [v for c in curves for v in c if math.isfinite(v)] or [0.0]
    lo, hi = min(values), max(values)
    steps = max(max(len(c) for c in curves) - 1, 1)
    for i, c in enumerate(curves):
        pts = [(margin + round(j / steps * (w - 2 * margin)),
                h - margin - round((v - lo) / ((hi - lo) or 1.0) * (h - 2 * margin))) for j, v in enumerate(c)]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:] or pts):
            n = max(abs(x1 - x0), abs(y1 - y0), 1)
            for t in range(n + 1):
                dot(x0 + round((x1 - x0) * t / n), y0 + round((y1 - y0) * t / n), COLOURS[i % len(COLOURS)])
    raw = b"".join(b"\x00" + bytes(px[3 * w * y:3 * w * (y + 1)]) for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def train(args) -> dict:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    device = torch.device(args.device)
    world, rank = 1, 0
    if args.parallel != "none":  # under torchrun: its environment names this process's rank
        import torch.distributed as dist

        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        world, rank = dist.get_world_size(), dist.get_rank()
        if device.type == "cuda":
            device = torch.device("cuda", rank % torch.cuda.device_count())
            torch.cuda.set_device(device)
    torch.manual_seed(args.seed)  # the same weights on every rank
    data = SyntheticText(args.vocab, 4, args.seed, stream=rank)  # each rank its own documents
    model = HybridLM(args.vocab, args.d_model, args.pattern, args.head_dim, args.headdim, args.d_state,
                     args.chunk).to(device)
    if args.parallel == "ddp":
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    elif args.parallel == "fsdp":  # FSDP2: each block's parameters sharded over the ranks, then the rest
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    attention, scan, conv, names = ops(args.ops, args.mamba_ssm)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    dtype = torch.bfloat16
    losses, step_s = [], []
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("loss {task.fields[loss]:.3f}  {task.fields[tps]:,.0f} tok/s"), TimeRemainingColumn())
    with Progress(*columns, disable=args.quiet or rank != 0) as bar:
        task = bar.add_task(args.ops, total=args.steps, loss=math.nan, tps=0.0)
        for step in range(args.steps):
            ids, labels, cu, seq_idx, longest = (t.to(device) if isinstance(t, torch.Tensor) else t
                                                 for t in data.packed(args.tokens, args.min_doc, args.max_doc))
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.autocast(device.type, dtype=dtype):
                logits = model(ids, cu, seq_idx, longest, attention, scan, conv)
            loss = F.cross_entropy(logits.float(), labels, ignore_index=-100)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            mean = loss.detach()
            if world > 1:  # the loss over every rank's tokens
                dist.all_reduce(mean)
                mean = mean / world
            value = float(mean)  # synchronises
            step_s.append(time.perf_counter() - t0)
            losses.append(value)
            timed = step_s[min(args.warmup, len(step_s) - 1):]
            bar.update(task, advance=1, loss=value, tps=world * args.tokens * len(timed) / sum(timed))
    timed = sorted(step_s[min(args.warmup, len(step_s) - 1):])
    if world > 1:
        dist.destroy_process_group()
    result = {"ops": args.ops, "attention": names[0], "scan": names[1], "device": str(device),
              "parallel": args.parallel, "world": world, "rank": rank,
              "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
              "config": json.loads(json.dumps(vars(args), default=str)),
              "losses": losses, "final_loss": sum(losses[-10:]) / len(losses[-10:]),
              "tokens_per_s": world * args.tokens / timed[len(timed) // 2], "median_step_ms": 1e3 * timed[len(timed) // 2]}
    return result


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", choices=["kgen", "peers"], default="kgen")
    ap.add_argument("--mamba-ssm", type=Path, default=None, help="an unpacked mamba-ssm tree for --ops peers")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of tokens/s (builds, autotuning)")
    ap.add_argument("--tokens", type=int, default=8192, help="tokens per step, one packed row")
    ap.add_argument("--min-doc", type=int, default=64)
    ap.add_argument("--max-doc", type=int, default=1024)
    ap.add_argument("--pattern", default="MMAMMA", help="M: Mamba-2 block, A: attention block")
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--head-dim", type=int, default=64, help="attention head dim")
    ap.add_argument("--headdim", type=int, default=64, help="Mamba-2 head dim")
    ap.add_argument("--d-state", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--png", type=Path, default=None, help="write the loss curve here")
    ap.add_argument("--json", type=Path, default=None, help="write losses and tokens/s here")
    ap.add_argument("--compare", type=Path, action="append", default=[],
                    help="another run's --json, whose loss curve the PNG also draws (repeatable)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--parallel", choices=["none", "ddp", "fsdp"], default="none",
                    help="under torchrun: DistributedDataParallel or FSDP2 (fully_shard), each rank its own documents")
    args = ap.parse_args(argv)
    if args.ops == "kgen" and args.mamba_ssm is not None:
        ap.error("--mamba-ssm names the peers' scan; it goes with --ops peers")
    if not set(args.pattern) <= {"M", "A"} or not args.pattern:
        ap.error(f"--pattern takes the letters M (Mamba-2 block) and A (attention block), got {args.pattern!r}")
    if args.d_model % args.head_dim or (2 * args.d_model) % args.headdim:
        ap.error(f"--d-model {args.d_model} must be a multiple of --head-dim {args.head_dim}, and twice it of "
                 f"--headdim {args.headdim}")
    if not 2 <= args.min_doc <= args.max_doc:
        ap.error(f"--min-doc and --max-doc need 2 <= min <= max, got {args.min_doc} and {args.max_doc}")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    try:
        others = {f"{r['ops']} ({r['scan'].split()[0]})": r["losses"] for r in (json.loads(p.read_text()) for p in args.compare)}
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"hybrid_lm: --compare takes the --json file of another run; {e}", file=sys.stderr)
        return 2
    try:
        result = train(args)
    except Exception as e:  # kgen's LaunchError and the peers' errors: one sentence, no traceback
        print(f"hybrid_lm: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        return 1
    if result["rank"] != 0:  # rank 0 reports for all
        return 0
    print(f"{args.ops}: final loss {result['final_loss']:.3f} (log vocab {math.log(args.vocab):.3f}), "
          f"{result['tokens_per_s']:,.0f} tokens/s, median step {result['median_step_ms']:.1f} ms "
          f"({result['attention']}; {result['scan']})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.png:
        write_png(args.png, {**others, f"{args.ops} ({result['scan'].split()[0]})": result["losses"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
