"""The `kgen` command: build, warm, check, inspect, list, targets, cache.

Every mistake a user can make prints one line to stderr, `error: <what was wrong; what is
accepted>`, and exits non-zero with no traceback: 2 for a usage error (a missing or malformed
argument, an unknown command, option, target or variant axis), 1 for the rest (a malformed spec, a
missing compiler, a folder that cannot be written), 130 after Ctrl-C. Everything a command
checks (spec, target, variants, --out, the compiler) is checked before anything is built, so a
failed command writes nothing.

The parsers are argparse's, with our own one-line messages for required arguments and values;
the commands import the compiler only when they run, so `kgen --help` starts in milliseconds.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn, Sequence

from . import __version__
from .errors import KgenError, UsageError

COMMANDS = {
    "build": "generate, compile and report every (selected) variant of a spec for a target",
    "warm": "compile every (selected) variant of specs into the kernel cache, in parallel",
    "check": "run every (selected) variant's kernels in emulation against the spec's reference",
    "inspect": "print the IR of one variant's kernel after each pass",
    "list": "list specs with their variants and kernels",
    "targets": "the hardware descriptors kgen knows",
    "cache": "where the kernel cache is and what it holds (info), or empty it (clear)",
    "tune": "time every tunable candidate on this machine's GPU for a size bucket and keep the fastest",
}
INTERRUPTED = 130  # the shell's code for a command ended by SIGINT


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage mistake raised as one UsageError instead of usage text and exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _target_name(text: str) -> str:
    from .hw.descriptor import load_target

    try:
        return load_target(text).name
    except KgenError as e:
        raise argparse.ArgumentTypeError(e.message) from None


def _variant_pair(text: str) -> tuple[str, str]:
    axis, eq, value = text.partition("=")
    if not eq or not axis.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"takes axis=value (e.g. dtype=bf16), got '{text}'")
    return axis.strip(), value.strip().lower()


def _size_pair(text: str) -> tuple[str, int]:
    name, eq, value = text.partition("=")
    if not eq or not name.strip() or not value.strip().isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"takes NAME=VALUE with a positive whole number (e.g. seqlen=100), got '{text}'")
    return name.strip(), int(value)


def _scalar_pair(text: str) -> tuple[str, float]:
    name, eq, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = None
    if not eq or not name.strip() or number is None or not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"takes NAME=VALUE with a finite number (e.g. prefix=2048), got '{text}'")
    return name.strip(), number


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"takes a positive whole number, got '{text}'")
    return n


def _parser() -> _Parser:
    top = _Parser(prog="kgen", description="kgen: YAML op specs -> HIP (gfx942) / CUDA (sm_90) kernels -> PyTorch ops.")
    top.add_argument("--version", action="version", version=f"kgen {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    target_help = "gfx942, gfx90a, sm_90 or sm_80 (or a product name: MI300X, H100, ...)"
    variant_help = "axis=value; repeat to select (default: every variant)"

    p = sub.add_parser("build", help=COMMANDS["build"], description=COMMANDS["build"] + ".")
    p.add_argument("spec", nargs="?", type=Path, metavar="SPEC")
    p.add_argument("--target", "-t", type=_target_name, help=target_help)
    p.add_argument("--variant", "-v", type=_variant_pair, action="append", default=[], help=variant_help)
    p.add_argument("--out", "-o", type=Path, default=Path("generated"), help="where sources and manifest.json go (default: generated)")
    p.add_argument("--no-compile", action="store_true", help="write the sources only, without compiling them")

    p = sub.add_parser("warm", help=COMMANDS["warm"], description=COMMANDS["warm"] + ", so that ops load warm on first use.")
    p.add_argument("specs", nargs="*", type=Path, metavar="SPEC")
    p.add_argument("--target", "-t", type=_target_name, help=target_help + "; default: this machine's GPU")
    p.add_argument("--variant", "-v", type=_variant_pair, action="append", default=[],
                   help=variant_help + "; an axis selects in the specs that have it")
    p.add_argument("--jobs", "-j", type=_positive_int, default=None, help="parallel builds (default: one per CPU core)")

    p = sub.add_parser("check", help=COMMANDS["check"], description=COMMANDS["check"] + ": small random inputs of "
                       "the spec's domains, ragged sizes, every output within the GPU tests' tolerance, memory and races "
                       "checked. Exits 1 on any mismatch or emulation error.")
    p.add_argument("spec", nargs="?", type=Path, metavar="SPEC")
    p.add_argument("--target", "-t", type=_target_name, help="an emulated target: gfx942 or gfx90a")
    p.add_argument("--emulate", action="store_true", help="run the kernels in the CPU emulation of the target (required)")
    p.add_argument("--variant", "-v", type=_variant_pair, action="append", default=[], help=variant_help)
    p.add_argument("--size", "-s", type=_size_pair, action="append", default=[],
                   help="NAME=VALUE; repeat (default: ragged sizes spanning two of the largest tiles)")
    p.add_argument("--jobs", "-j", type=_positive_int, default=None, help="variants checked in parallel (default: one per CPU core)")

    p = sub.add_parser("tune", help=COMMANDS["tune"], description=COMMANDS["tune"] + " in the tuning database "
                       "(<cache>/tuning.json), which calls of that bucket (each size rounded up to a power of two) then use.")
    p.add_argument("spec", nargs="?", type=Path, metavar="SPEC")
    p.add_argument("--size", "-s", type=_size_pair, action="append", default=[], help="NAME=VALUE for every size of the spec")
    p.add_argument("--variant", "-v", type=_variant_pair, action="append", default=[], help=variant_help)
    p.add_argument("--scalar", "-S", type=_scalar_pair, action="append", default=[],
                   help="NAME=VALUE for a run-time scalar the calls take (default: a small fixed value); repeat")
    p.add_argument("--runs", type=_positive_int, default=20, help="timed calls per candidate (median; default 20)")
    p.add_argument("--where", action="append", default=[], metavar="EXPR",
                   help="time only the candidates for which EXPR (of the tunables and variant axes, e.g. 'WARPS >= 8') "
                   "holds; repeat to require several")
    p.add_argument("--jobs", "-j", type=_positive_int, default=None,
                   help="candidates built in parallel before the timing (default: one per CPU core)")
    p.add_argument("--show", action="store_true", help="list the database's entries instead (every spec, or SPEC's)")
    p.add_argument("--backward", action="store_true", help="tune the spec's backward (autograd.backward, or the backward "
                   "a variant derives from its base's) instead of the spec")

    p = sub.add_parser("inspect", help=COMMANDS["inspect"], description=COMMANDS["inspect"] + ".")
    p.add_argument("spec", nargs="?", type=Path, metavar="SPEC")
    p.add_argument("--target", "-t", type=_target_name, help=target_help)
    p.add_argument("--variant", "-v", type=_variant_pair, action="append", default=[], help="axis=value (default: the first variant)")
    p.add_argument("--kernel", "-k", default=None, help="which kernel of the spec: its 0-based index or its name "
                                                         "(default: the first the variant launches)")

    p = sub.add_parser("list", help=COMMANDS["list"], description=COMMANDS["list"] + ".")
    p.add_argument("directory", nargs="?", type=Path, metavar="FOLDER", help="a folder of specs (default: the shipped ones)")

    sub.add_parser("targets", help=COMMANDS["targets"], description=COMMANDS["targets"] + ".")

    p = sub.add_parser("cache", help=COMMANDS["cache"], description=COMMANDS["cache"] + ". KGEN_CACHE_DIR moves it.")
    p.add_argument("action", nargs="?", metavar="info|clear")
    return top


def _console():
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 160)


def _need(value: Any, message: str) -> Any:
    if value is None:
        raise UsageError(message)
    return value


def _accepted_targets() -> str:
    from .hw.descriptor import target_names

    return ", ".join(target_names())


def _check_out(out: Path) -> None:
    """--out must be a folder kgen can write into (or create): checked before anything compiles."""
    if out.exists() and not out.is_dir():
        raise KgenError(f"--out {out} is a file, not a folder; give a folder to write the sources into")
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise KgenError(f"cannot create --out {out}: {probe} is a file, not a folder")
    try:
        fd, name = tempfile.mkstemp(prefix=".kgen-probe-", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        raise KgenError(f"cannot write into --out {out}: {e.strerror} ({probe}); give a folder you can write to") from None


def _check_compiler(tg, what: str) -> None:
    from .backends import find_compiler

    try:
        find_compiler(tg.backend)
    except KgenError as e:
        raise KgenError(f"cannot compile for {tg.name}: {e.message}; {what}") from None


def _selected(ls, pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return ls.select_variant(dict(pairs))


def cmd_build(a: argparse.Namespace) -> int:
    from rich.progress import Progress

    from .build import build_spec, write_build
    from .hw.descriptor import load_target
    from .spec.load import load_spec

    spec = _need(a.spec, "kgen build needs a spec file: kgen build SPEC --target TARGET")
    target = _need(a.target, f"kgen build needs --target; accepted: {_accepted_targets()}")
    ls = load_spec(spec)
    tg = load_target(target)
    variants = _selected(ls, a.variant)
    _check_out(a.out)
    if not a.no_compile:
        _check_compiler(tg, "pass --no-compile to write the sources only")
    console = _console()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"{ls.spec.name} -> {tg.name}", total=len(variants))
        built = build_spec(ls, tg, variants, compile=not a.no_compile, on_variant=lambda bv: progress.advance(task))
    where = write_build(a.out, ls, tg, built)
    from .report import build_table

    console.print(build_table(built, tg, compiled=not a.no_compile))
    console.print(f"wrote {where}")
    return 0


def cmd_warm(a: argparse.Namespace) -> int:
    from rich.progress import Progress

    from .hw.descriptor import load_target
    from .runtime.compiled import warm_cache
    from .spec.load import load_spec

    if not a.specs:
        raise UsageError("kgen warm needs at least one spec file: kgen warm SPEC... [--target TARGET]")
    tg = load_target(a.target) if a.target else _local_target()
    loaded = [load_spec(s) for s in a.specs]
    axes = {axis for ls in loaded for axis in ls.spec.variants}
    unknown = [axis for axis, _ in a.variant if axis not in axes]
    if unknown:
        raise UsageError(f"unknown variant axis '{unknown[0]}'; axes of the given specs: {', '.join(sorted(axes)) or 'none'}")
    _check_compiler(tg, "kgen warm compiles; install the compiler first")
    # an axis given with --variant selects in the specs that have it (fa2_bwd's deterministic)
    work = [(ls, v) for ls in loaded for v in _selected(ls, [(x, y) for x, y in a.variant if x in ls.spec.variants])]
    console = _console()
    with Progress(console=console) as progress:
        task = progress.add_task(f"warming {len(work)} variants for {tg.name}", total=len(work))
        warm_cache(work, tg, a.jobs or os.cpu_count() or 1, on_done=lambda ls, v: progress.advance(task))
    console.print(f"{len(work)} variants cached for {tg.name}")
    return 0


def _local_target():
    import warnings

    with warnings.catch_warnings():  # torch's CPU wheel warns on import when numpy is absent; kgen needs no numpy
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        import torch
    from .runtime.op import device_target

    if not torch.cuda.is_available():
        raise UsageError(f"kgen warm needs --target on a machine without a GPU; accepted: {_accepted_targets()}")
    return device_target(torch.device("cuda"))


def cmd_check(a: argparse.Namespace) -> int:
    from .backends import emulator
    from .hw.descriptor import load_target
    from .report import check_table
    from .spec.load import load_spec

    spec = _need(a.spec, "kgen check needs a spec file: kgen check SPEC --target gfx942 --emulate")
    target = _need(a.target, "kgen check needs --target; accepted: gfx942, gfx90a (with --emulate)")
    if not a.emulate:
        raise UsageError("kgen check runs kernels in emulation only: add --emulate (the GPU tests run them on hardware)")
    ls = load_spec(spec)
    tg = load_target(target)
    emulator(tg)
    sizes = dict(a.size)
    unknown = [n for n in sizes if n not in ls.spec.sizes]
    if unknown:
        raise UsageError(f"--size {unknown[0]} is not a size of {ls.spec.name}; accepted: {', '.join(ls.spec.sizes) or 'none'}")
    variants = _selected(ls, a.variant)
    if not variants:
        raise UsageError(f"no variant of {ls.spec.name} matches {' '.join(f'{x}={y}' for x, y in a.variant)} (some are excluded)")
    _check_compiler(tg, "the emulation compiles the kernels for this CPU with it")
    rows = _check_rows(ls.path, tg.name, variants, sizes, a.jobs or os.cpu_count() or 1)
    console = _console()
    console.print(check_table(ls.spec.name, tg.name, rows))
    bad = [r for r in rows if not r.ok]
    for r in bad:
        print(f"{r.variant} {r.output}: {r.detail}", file=sys.stderr)
    print(f"{len(variants) - len({r.variant for r in bad})} of {len(variants)} variants passed", file=sys.stderr)
    return 1 if bad else 0


def _check_one(path: Path, target: str, variant: dict[str, Any], sizes: dict[str, int]) -> list:
    from .check.emulated import check_variant
    from .hw.descriptor import load_target
    from .spec.load import load_spec

    return check_variant(load_spec(path), variant, load_target(target), sizes)


def _check_rows(path: Path, target: str, variants: list[dict[str, Any]], sizes: dict[str, int], jobs: int) -> list:
    """Each variant's rows, in variant order; in `jobs` processes (each compiles its own kernels)."""
    if jobs == 1 or len(variants) == 1:
        return [r for v in variants for r in _check_one(path, target, v, sizes)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(min(jobs, len(variants)), mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_check_one, *zip(*[(path, target, v, sizes) for v in variants])))
    return [r for rows in results for r in rows]


def cmd_inspect(a: argparse.Namespace) -> int:
    """The IR of the kernel as it ships: the variant is built as `kgen build` builds it (compiled
    when the target's compiler is here, since a kernel that spills is rebuilt with other options),
    then that kernel is lowered again with the tunables and options it shipped with, printing the
    IR after each pass."""
    from .backends import available
    from .build import build_variant
    from .hw.descriptor import load_target
    from .driver import compile_kernel
    from .spec.load import load_spec

    spec = _need(a.spec, "kgen inspect needs a spec file: kgen inspect SPEC --target TARGET")
    target = _need(a.target, f"kgen inspect needs --target; accepted: {_accepted_targets()}")
    ls = load_spec(spec)
    tg = load_target(target)
    names = [k.name for k in ls.spec.kernels]
    index = None
    if a.kernel is None:
        pass  # the first kernel the variant launches, known once it is built
    elif a.kernel in names:
        index = names.index(a.kernel)
    elif a.kernel.isdigit() and int(a.kernel) < len(names):
        index = int(a.kernel)
    else:
        indices = "0" if len(names) == 1 else f"0-{len(names) - 1}"
        raise UsageError(f"--kernel {a.kernel} is not a kernel of {ls.spec.name}; accepted: {indices} or a name: {', '.join(names)}")
    variants = _selected(ls, a.variant)
    if not variants:
        raise UsageError(f"no variant of {ls.spec.name} matches {' '.join(f'{x}={y}' for x, y in a.variant)} (some are excluded)")
    v = variants[0]
    compiled = available(tg.backend)
    shipped = build_variant(ls, v, tg, compile=compiled)
    if index is None:  # an empty kernel (BuiltKernel.empty) is neither compiled nor launched
        index = next((i for i, k in enumerate(shipped.kernels) if not k.empty), 0)
    options = shipped.kernels[index].options
    console = _console()
    how = "as compiled here" if compiled else f"sources only: no {tg.backend} compiler here, so spill retries are not known"
    console.print(f"[bold]{ls.spec.name}[/] variant {v} tunables {shipped.tunables} options {options} on {tg.name} ({how})",
                  markup=True, highlight=False)
    compile_kernel(ls, index, v, shipped.tunables, tg, options=options,
                   trace=lambda name, text: console.print(f"[bold cyan]== after {name}[/]\n{text}", markup=True, highlight=False))
    return 0


def cmd_list(a: argparse.Namespace) -> int:
    from rich.table import Table

    from .paths import shipped_specs_dir
    from .spec.load import load_spec

    folder = a.directory or shipped_specs_dir()
    if not folder.is_dir():
        raise KgenError(f"{folder} is not a folder; give a folder of .yaml specs")
    t = Table()
    for col in ("spec", "summary", "variants", "kernels", "backward"):
        t.add_column(col)
    for p in sorted(folder.glob("*.yaml")):
        ls = load_spec(p)
        s = ls.spec
        t.add_row(p.name, s.summary, str(len(ls.variants())), ", ".join(k.name for k in s.kernels),
                  s.autograd.backward if s.autograd else "-")
    _console().print(t)
    return 0


def cmd_targets(a: argparse.Namespace) -> int:
    from .hw.descriptor import targets_table

    _console().print(targets_table())
    return 0


def cmd_cache(a: argparse.Namespace) -> int:
    from .runtime.cache import Cache

    if a.action not in ("info", "clear"):
        got = f", got '{a.action}'" if a.action else ""
        raise UsageError(f"kgen cache takes info or clear{got}")
    cache = Cache()
    if a.action == "clear":
        print(f"removed {cache.clear()} entries from {cache.root}")
        return 0
    info = cache.info()
    print(f"root     {info['root']}  (KGEN_CACHE_DIR moves it)")
    print(f"entries  {info['entries']}, {info['entries_bytes'] / 2**20:.1f} MiB")
    print(f"leftover {(info['tmp_bytes'] + info['trash_bytes']) / 2**20:.1f} MiB in tmp/ and trash/ (removed by the next build)")
    return 0


def cmd_tune(a: argparse.Namespace) -> int:
    from .report import tune_tables

    if a.show:
        from .tune import show_rows

        rows = show_rows()
        if a.spec is not None:
            from .spec.load import load_spec

            rows = [r for r in rows if r["spec"] == _tuned_spec(a.spec, a.backward).spec.name]
        _console().print(tune_tables(rows))
        return 0
    spec = _need(a.spec, "kgen tune needs a spec file: kgen tune SPEC --size NAME=VALUE ... (or --show)")
    ls = _tuned_spec(spec, a.backward)
    sizes = dict(a.size)
    unknown = [n for n in sizes if n not in ls.spec.sizes]
    missing = [n for n in ls.spec.sizes if n not in sizes]
    if unknown or missing:
        what = f"--size {unknown[0]} is not a size of {ls.spec.name}" if unknown else f"kgen tune needs every size of {ls.spec.name}; missing {', '.join(missing)}"
        raise UsageError(f"{what}; its sizes: {', '.join(ls.spec.sizes) or 'none'}")
    scalars = _tune_scalars(ls, a.scalar)
    variants = _selected(ls, a.variant)
    if not variants:
        raise UsageError(f"no variant of {ls.spec.name} matches {' '.join(f'{x}={y}' for x, y in a.variant)} (some are excluded)")
    # a bucketed axis is not chosen but follows its size: only the variants of these sizes' buckets run
    from .runtime.binding import bucket_value

    buckets = {axis: bucket_value(ls.spec, axis, sizes[size]) for axis, size in ls.spec.buckets.items()}
    for axis, value in buckets.items():
        if value is None:
            size = ls.spec.buckets[axis]
            raise UsageError(f"--size {size}={sizes[size]} is above the largest bucket of {axis}; accepted: {size} <= {ls.spec.variants[axis][-1]}")
    variants = [v for v in variants if all(v[axis] == value for axis, value in buckets.items())]
    if not variants:
        raise UsageError(f"no selected variant of {ls.spec.name} is in the buckets of these sizes ({', '.join(f'{x}={y}' for x, y in buckets.items())})")
    from .spec.load import variant_id
    from .tune import chosen_candidates

    chosen = [chosen_candidates(ls, v, a.where) for v in variants]
    import torch

    if not torch.cuda.is_available():
        raise UsageError("kgen tune times kernels on this machine's GPU, and none was found (torch.cuda.is_available() is False)")
    from .runtime.op import device_target, load
    from .tune import cuda_timer, l2_flush, prebuild, store, tune_variant

    target = device_target(torch.device("cuda"))
    _check_compiler(target, "kgen tune compiles each candidate; install the compiler first")
    op = load(spec)
    if a.backward:
        op = op.backward_op
    console = _console()
    timer = cuda_timer(a.runs, l2_flush())
    for variant, cands in zip(variants, chosen):
        with console.status(f"building {len(cands)} candidates of {variant_id(variant)}"):
            prebuild(spec, a.backward, variant, target, cands, a.jobs or os.cpu_count() or 1)
        tuned = tune_variant(op, variant, target, sizes, "cuda", timer, scalars, cands)
        entry = store(ls, target, tuned)
        console.print(tune_tables([], tuned=tuned, entry=entry))
    return 0


def _tune_scalars(ls, given: list[tuple[str, float]]) -> dict[str, float | int]:
    """--scalar values by the spec's scalar dtypes: whole numbers for integer scalars."""
    out: dict[str, float | int] = {}
    for name, value in given:
        param = ls.spec.scalars.get(name)
        if param is None:
            raise UsageError(f"--scalar {name} is not a run-time scalar of {ls.spec.name}; its scalars: {', '.join(ls.spec.scalars) or 'none'}")
        bits = {"int32": 31, "int64": 63}.get(param.dtype)
        if bits is not None and (value != int(value) or not -2**bits <= value < 2**bits):
            raise UsageError(f"--scalar {name}={value:g}: {name} is an {param.dtype} scalar of {ls.spec.name}; "
                             f"give a whole number from {-2**bits} to {2**bits - 1}")
        out[name] = value if param.dtype == "fp32" else int(value)
    return out


def _tuned_spec(spec: Path, backward: bool):
    """The spec `kgen tune` times: SPEC, or with --backward the backward its calls run."""
    from .spec.load import backward_spec, load_spec

    ls = load_spec(spec)
    if not backward:
        return ls
    if ls.spec.autograd is None:
        raise UsageError(f"--backward: {ls.spec.name} has no backward (no autograd in {spec}); "
                         "tune the spec itself, or its backward's own file")
    return backward_spec(ls)


HANDLERS = {"build": cmd_build, "warm": cmd_warm, "check": cmd_check, "inspect": cmd_inspect, "list": cmd_list,
            "targets": cmd_targets, "cache": cmd_cache, "tune": cmd_tune}


def run(argv: Sequence[str]) -> int:
    """Parse and run one command; raises KgenError (UsageError for usage mistakes)."""
    argv = list(argv)
    if not argv:
        raise UsageError(f"kgen needs a command; accepted: {', '.join(COMMANDS)} (see kgen --help)")
    if not argv[0].startswith("-") and argv[0] not in COMMANDS:
        raise UsageError(f"unknown command '{argv[0]}'; accepted: {', '.join(COMMANDS)} (see kgen --help)")
    args, extra = _parser().parse_known_args(argv)
    if extra:
        prog = f"kgen {args.command}" if args.command else "kgen"
        raise UsageError(f"{prog}: unrecognized arguments: {' '.join(extra)} (see {prog} --help)")
    if args.command is None:
        raise UsageError(f"kgen needs a command; accepted: {', '.join(COMMANDS)} (see kgen --help)")
    return HANDLERS[args.command](args)


def _say(message: str) -> None:
    print(f"error: {' '.join(message.split())}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> None:
    try:
        code = run(sys.argv[1:] if argv is None else argv)
    except KgenError as e:
        _say(str(e))
        code = e.exit_code
    except KeyboardInterrupt:
        _say("interrupted; the builds in progress were stopped and nothing half-built was kept")
        code = INTERRUPTED
    except BrokenPipeError:  # `kgen list | head`: the reader left
        code = 0
    except OSError as e:
        _say(f"{e.strerror or e}" + (f": {e.filename}" if e.filename else ""))
        code = 1
    sys.stdout.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
