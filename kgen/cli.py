"""The `kgen` command: build, warm, list, targets, inspect. User errors print one line, no traceback."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from .errors import KgenError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="kgen: YAML op specs -> HIP (gfx942) / CUDA (sm_90) kernels -> PyTorch ops.")
console = Console(width=None if sys.stdout.isatty() else 160)


def _variants(ls, pairs: list[str]):
    wanted = {}
    for p in pairs or []:
        if "=" not in p:
            raise KgenError(f"--variant takes axis=value, got '{p}'")
        a, v = p.split("=", 1)
        wanted[a.strip()] = v.strip().lower()
    return ls.select_variant(wanted)


@app.command()
def build(spec: Path, target: str = typer.Option(..., "--target", "-t", help="gfx942, gfx90a, sm_90 or sm_80"),
          variant: Optional[List[str]] = typer.Option(None, "--variant", "-v", help="axis=value; repeat to select"),
          out: Path = typer.Option(Path("generated"), "--out", "-o", help="where sources and manifest.json go"),
          no_compile: bool = typer.Option(False, "--no-compile", help="generate sources only")):
    """Generate, compile and report every variant of SPEC for TARGET."""
    from .build import build_spec, write_build
    from .hw.descriptor import load_target
    from .spec.load import load_spec
    from .toolchain import available

    ls = load_spec(spec)
    tg = load_target(target)
    variants = _variants(ls, variant or [])
    compile_ = not no_compile and available(tg.backend)
    if not no_compile and not compile_:
        from .toolchain import find_compiler

        try:
            find_compiler(tg.backend)
        except KgenError as e:
            console.print(f"[yellow]note:[/] sources only: {e.message}")
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"{ls.spec.name} -> {tg.name}", total=len(variants))
        built = build_spec(ls, tg, variants, compile=compile_, on_variant=lambda bv: progress.advance(task))
    where = write_build(out, ls, tg, built)
    console.print(_report(built, tg, compile_))
    console.print(f"wrote {where}")


def _report(built, tg, compiled: bool) -> Table:
    amd = tg.backend == "hip"
    t = Table(title=f"{tg.name} ({tg.backend})")
    for col in ["variant", "kernel", "threads", "tunables"] + (
            (["VGPR", "AGPR", "LDS", "scratch", "occupancy", "MFMA"] if amd else ["regs", "smem", "spills", "HMMA"]) if compiled else ["planned smem"]):
        t.add_column(col)
    for bv in built:
        for k in bv.kernels:
            row = [bv.id, k.name, str(k.threads), ",".join(f"{a}={v}" for a, v in bv.tunables.items())]
            r = k.resources or {}
            if not compiled:
                row.append(str(k.shared_bytes))
            elif amd:
                row += [str(r.get("registers")), str(r.get("agprs")), str(r.get("shared_bytes")), str(r.get("spill_bytes")),
                        str(r.get("occupancy")), " ".join(r.get("matrix_instrs") or []) or "-"]
            else:
                row += [str(r.get("registers")), str(max(k.shared_bytes, r.get("shared_bytes") or 0)), str(r.get("spill_bytes")),
                        " ".join(r.get("matrix_instrs") or []) or ("-" if r.get("disasm_tool") else "n/a")]
            t.add_row(*row)
    return t


@app.command("list")
def list_specs(directory: Path = typer.Argument(None, help="a folder of specs (default: the shipped ones)")):
    """List specs with their variants and kernels."""
    from .paths import shipped_specs_dir
    from .spec.load import load_spec

    t = Table()
    for col in ("spec", "summary", "variants", "kernels", "backward"):
        t.add_column(col)
    for p in sorted((directory or shipped_specs_dir()).glob("*.yaml")):
        ls = load_spec(p)
        s = ls.spec
        t.add_row(p.name, s.summary, str(len(ls.variants())), ", ".join(k.name for k in s.kernels),
                  s.autograd.backward if s.autograd else "-")
    console.print(t)


@app.command()
def warm(specs: List[Path], target: Optional[str] = typer.Option(None, "--target", "-t", help="default: this machine's GPU"),
         variant: Optional[List[str]] = typer.Option(None, "--variant", "-v", help="axis=value; repeat to select"),
         jobs: int = typer.Option(0, "--jobs", "-j", help="parallel builds (default: one per CPU core)")):
    """Compile every (selected) variant of SPECS into the kernel cache, in parallel, so that the
    ops load warm on first use."""
    import os

    from .hw.descriptor import load_target
    from .runtime.compiled import warm_cache
    from .spec.load import load_spec

    if target is None:
        import torch

        from .runtime.op import device_target

        if not torch.cuda.is_available():
            raise KgenError("kgen warm needs --target on a machine without a GPU; accepted: gfx942, gfx90a, sm_90, sm_80")
        tg = device_target(torch.device("cuda"))
    else:
        tg = load_target(target)
    work = []
    for spec in specs:
        ls = load_spec(spec)
        # an axis given with --variant selects in the specs that have it (fa2_bwd's
        # deterministic) and is ignored by the others
        pairs = [p for p in variant or [] if p.split("=", 1)[0].strip() in ls.spec.variants]
        work += [(ls, v) for v in _variants(ls, pairs)]
    with Progress(console=console) as progress:
        task = progress.add_task(f"warming {len(work)} variants for {tg.name}", total=len(work))
        warm_cache(work, tg, jobs or os.cpu_count() or 1, on_done=lambda ls, v: progress.advance(task))
    console.print(f"{len(work)} variants cached for {tg.name}")


@app.command()
def targets():
    """The hardware descriptors kgen knows."""
    from .hw.descriptor import targets_table

    console.print(targets_table())


@app.command()
def inspect(spec: Path, target: str = typer.Option(..., "--target", "-t"),
            variant: Optional[List[str]] = typer.Option(None, "--variant", "-v"),
            kernel: int = typer.Option(0, "--kernel", "-k", help="which kernel of the spec (0-based)")):
    """Print the IR of one variant's kernel after each pass."""
    from .build import lower_variant
    from .hw.descriptor import load_target
    from .ir.pipeline import compile_kernel
    from .spec.load import load_spec

    ls = load_spec(spec)
    tg = load_target(target)
    v = _variants(ls, variant or [])[0]
    tunables, _ = lower_variant(ls, v, tg)
    console.print(f"[bold]{ls.spec.name}[/] variant {v} tunables {tunables} on {tg.name}")
    compile_kernel(ls, kernel, v, tunables, tg, trace=lambda name, text: console.print(f"[bold cyan]== after {name}[/]\n{text}", markup=True, highlight=False))


def main() -> None:
    try:
        app(standalone_mode=False)
    except KgenError as e:
        Console(stderr=True).print(f"[red]error:[/] {e}", markup=True, highlight=False)
        sys.exit(1)
    except typer.Abort:
        sys.exit(1)
    except Exception as e:  # click usage errors
        import click

        if isinstance(e, click.ClickException):
            e.show()
            sys.exit(e.exit_code)
        raise


if __name__ == "__main__":
    main()
