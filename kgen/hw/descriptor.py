"""Hardware descriptors as data: one YAML file per target under kgen/hw/data/.

A `Target` says what a GPU offers (compute units, LDS, registers, caches, peaks, async copies) and
which matrix instructions it has. Every number carries its source in `sources`, so a reader can
check it; the validator refuses a file where one is missing. A `MatrixInstr` carries the operand
fragments as linear layouts (kgen.ir.layout.Layout): for each bit of the per-lane element index
and of the lane index, the tile coordinate it moves to. Codegen, the interpreter and the
lane-level tests all read the fragments from here, so there is one statement of each layout.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from rich.table import Table

from kgen.errors import TargetError
from kgen.ir.layout import Layout, is_pow2, log2

DATA_DIR = Path(__file__).with_name("data")

# Other names users type for the same target; keys are lower case.
ALIASES = {
    "sm_90a": "sm_90",
    "h100": "sm_90",
    "h200": "sm_90",
    "mi300x": "gfx942",
    "mi250x": "gfx90a",
    "a100": "sm_80",
}

Vec = tuple[int, int]
Operand = Literal["a", "b", "c", "d"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OperandLayout(_Frozen):
    """One operand's fragment: tile shape and a basis vector per register-element bit and per lane
    bit. `warp` stays empty: these instructions are issued by one warp (or wave)."""

    shape: tuple[int, int]
    reg: tuple[Vec, ...]
    lane: tuple[Vec, ...]
    warp: tuple[Vec, ...] = ()

    def to_layout(self) -> Layout:
        return Layout(shape=self.shape, reg=self.reg, lane=self.lane, warp=self.warp)


class MatrixInstr(_Frozen):
    """A warp-level matrix multiply-accumulate D = A (m x k) @ B (k x n) + C (m x n)."""

    name: str
    spelling: str  # what the generated source writes: clang builtin (AMD) or PTX (NVIDIA)
    isa_mnemonic: str  # what shows up in the disassembly
    m: int
    n: int
    k: int
    ab_dtype: Literal["bf16", "fp16"]
    acc_dtype: Literal["fp32"]
    scope: Literal["warp"]
    a: OperandLayout
    b: OperandLayout
    c: OperandLayout

    def layout(self, operand: Operand) -> Layout:
        """The fragment of operand 'a', 'b' or 'c' ('d' shares the layout of 'c')."""
        if operand not in ("a", "b", "c", "d"):
            raise TargetError(f"unknown operand '{operand}'; accepted operands: a, b, c, d")
        return {"a": self.a, "b": self.b, "c": self.c, "d": self.c}[operand].to_layout()

    @model_validator(mode="after")
    def _check_fragments(self) -> "MatrixInstr":
        for op, want in (("a", (self.m, self.k)), ("b", (self.k, self.n)), ("c", (self.m, self.n))):
            frag: OperandLayout = getattr(self, op)
            where = f"{self.name}.{op}"
            if frag.shape != want:
                raise ValueError(f"{where}: shape {list(frag.shape)}, expected {list(want)}")
            if not all(is_pow2(s) for s in want):
                raise ValueError(f"{where}: tile sides must be powers of two")
            if frag.warp:
                raise ValueError(f"{where}: a warp-level instruction has no warp bits")
            if len(frag.reg) + len(frag.lane) != log2(want[0] * want[1]):
                raise ValueError(f"{where}: reg + lane bits must address the {want} tile")
            for v in frag.reg + frag.lane:
                if not all(0 <= x < s for x, s in zip(v, want)):
                    raise ValueError(f"{where}: basis vector {list(v)} lies outside the tile")
            if not frag.to_layout().covers_tile():
                raise ValueError(f"{where}: the layout is not a bijection onto the tile")
        return self


class SharedMatrixLoad(_Frozen):
    """A warp-wide load of 16-bit 8x8 matrices from shared memory into fragment registers
    (ldmatrix on NVIDIA). Each group of `rows` lanes gives the row addresses of one matrix (lane
    l the row l % rows of matrix l // rows); every lane then receives, per matrix, the elements
    `frag` names: a basis vector (row, col) per bit of the element index and of the lane index.
    `transposed`: a variant reads each matrix transposed (stored rows become columns)."""

    name: str
    spelling: str
    rows: int
    elem_bytes: int
    max_matrices: int
    transposed: bool
    frag: OperandLayout

    def layout(self) -> Layout:
        return self.frag.to_layout()


class Target(_Frozen):
    name: str
    products: tuple[str, ...]
    backend: Literal["hip", "cuda"]
    compiler_arch: str  # passed to the compiler: --offload-arch=gfx942, -arch=sm_90a
    wave_size: int
    num_cus: int  # CUs (AMD) or SMs (NVIDIA)
    xcds: int  # chiplets with their own L2; 1 on NVIDIA
    cus_per_xcd: int
    l2_bytes_per_xcd: int
    llc_bytes: int  # last-level cache behind L2 (AMD Infinity Cache); 0 if none
    lds_bytes_per_cu: int
    lds_bytes_per_block: int  # most static + dynamic LDS / shared memory one block may use
    max_threads_per_block: int
    max_regs_per_thread: int  # 32-bit; on gfx90a/gfx942 arch VGPRs + AGPRs together
    max_arch_vgprs: int  # 32-bit registers ordinary (non-MFMA) instructions can name
    regs_per_cu: int  # 32-bit registers per CU / SM
    peak_bf16_tflops: float  # dense
    mem_bandwidth_tbps: float
    async_copy: tuple[Literal["cp.async", "tma", "lds_dma"], ...]
    global_fp32_atomic_add: bool
    workgroup_dispatch: Literal["round_robin_xcd", "single"]
    matrix_instrs: tuple[MatrixInstr, ...]
    shared_matrix_load: SharedMatrixLoad | None = None
    sources: dict[str, str]

    @classmethod
    def numeric_fields(cls) -> list[str]:
        return [n for n, f in cls.model_fields.items() if f.annotation in (int, float)]

    def matrix_instr(self, name: str) -> MatrixInstr:
        for mi in self.matrix_instrs:
            if mi.name == name:
                return mi
        known = ", ".join(mi.name for mi in self.matrix_instrs)
        raise TargetError(f"target {self.name} has no matrix instruction '{name}'; it has: {known}")

    @model_validator(mode="after")
    def _check(self) -> "Target":
        instr_keys = [f"matrix_instrs.{mi.name}" for mi in self.matrix_instrs]
        needed = self.numeric_fields() + instr_keys + (["shared_matrix_load"] if self.shared_matrix_load else [])
        missing = [k for k in needed if not self.sources.get(k, "").strip()]
        if missing:
            raise ValueError(f"no source given for: {', '.join(missing)}")
        unknown = sorted(set(self.sources) - set(type(self).model_fields) - set(instr_keys))
        if unknown:
            raise ValueError(f"sources name unknown fields: {', '.join(unknown)}")
        if not is_pow2(self.wave_size):
            raise ValueError(f"wave_size {self.wave_size} is not a power of two")
        if self.num_cus != self.xcds * self.cus_per_xcd:
            raise ValueError(f"num_cus {self.num_cus} is not xcds x cus_per_xcd "
                             f"({self.xcds} x {self.cus_per_xcd})")
        if self.lds_bytes_per_block > self.lds_bytes_per_cu:
            raise ValueError("lds_bytes_per_block exceeds lds_bytes_per_cu")
        if self.max_arch_vgprs > self.max_regs_per_thread:
            raise ValueError("max_arch_vgprs exceeds max_regs_per_thread")
        names = [mi.name for mi in self.matrix_instrs]
        if len(set(names)) != len(names):
            raise ValueError("matrix instruction names repeat")
        # Every lane of the warp holds part of every operand: lane bits = log2(wave_size), and
        # with the tile-size check in MatrixInstr, reg bits = log2(rows * cols / wave_size).
        for mi in self.matrix_instrs:
            for op in ("a", "b", "c"):
                if len(getattr(mi, op).lane) != log2(self.wave_size):
                    raise ValueError(f"{mi.name}.{op}: needs {log2(self.wave_size)} lane bits")
        return self


def target_from_yaml(path: Path) -> Target:
    """Read and validate one descriptor file; any problem is a TargetError naming the file."""
    try:
        data = yaml.safe_load(Path(path).read_text())
        return Target.model_validate(data)
    except (OSError, yaml.YAMLError) as e:
        raise TargetError(f"cannot read hardware descriptor {path}: {e}") from e
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "top level"
        raise TargetError(f"hardware descriptor {path} is invalid at {loc}: {err['msg']}") from e


def target_names() -> list[str]:
    return sorted(p.stem for p in DATA_DIR.glob("*.yaml"))


@lru_cache(maxsize=None)
def _load(name: str) -> Target:
    target = target_from_yaml(DATA_DIR / f"{name}.yaml")
    if target.name != name:
        raise TargetError(f"hardware descriptor {name}.yaml names itself '{target.name}'")
    return target


def load_target(name: str) -> Target:
    """The target for a name or alias (case-insensitive): gfx942, MI300X, sm_90a, H100, ..."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    names = target_names()
    if key not in names:
        raise TargetError(f"unknown target '{name}'; accepted targets: {', '.join(names)}")
    return _load(key)


def all_targets() -> list[Target]:
    return [_load(n) for n in target_names()]


def _bytes(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n / 2**10:g} KiB"


def targets_table() -> Table:
    table = Table(title="kgen targets")
    for col in ("name", "products", "backend", "wave", "CUs (xcds)", "LDS/block KiB", "L2",
                "peak bf16", "matrix instrs"):
        table.add_column(col)
    for t in all_targets():
        l2 = _bytes(t.l2_bytes_per_xcd) + (f" x {t.xcds}" if t.xcds > 1 else "")
        if t.llc_bytes:
            l2 += f" + {_bytes(t.llc_bytes)} LLC"
        table.add_row(
            t.name, ", ".join(t.products), t.backend, str(t.wave_size), f"{t.num_cus} ({t.xcds})",
            f"{t.lds_bytes_per_block / 1024:g}", l2, f"{t.peak_bf16_tflops:g} TFLOP/s",
            ", ".join(mi.name for mi in t.matrix_instrs),
        )
    return table
