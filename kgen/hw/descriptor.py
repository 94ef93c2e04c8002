"""Hardware descriptors as data: one YAML file per target under kgen/hw/data/.

A `Target` says what a GPU offers (compute units, LDS, registers, caches, peaks, async copies) and
which matrix instructions it has. Every number carries its source in `sources`, so a reader can
check it; the validator refuses a file where one is missing. A `MatrixInstr` carries the operand
fragments as linear layouts (kgen.layout.Layout): for each bit of the per-lane element index
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
from kgen.layout import Layout, is_pow2, log2

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
    bit, and per warp bit for an instruction a group of warps issues together (warpgroup)."""

    shape: tuple[int, int]
    reg: tuple[Vec, ...]
    lane: tuple[Vec, ...]
    warp: tuple[Vec, ...] = ()

    def to_layout(self) -> Layout:
        return Layout(shape=self.shape, reg=self.reg, lane=self.lane, warp=self.warp)


Source = Literal["reg", "shared"]


class MatrixInstr(_Frozen):
    """A matrix multiply-accumulate D = A (m x k) @ B (k x n) + C (m x n), issued by one warp
    (scope 'warp') or by `warps` consecutive warps together (scope 'warpgroup': Hopper's wgmma).

    `a_from` / `b_from` say where the instruction reads an operand: 'reg', fragment registers in
    the operand's layout; 'shared', a shared-memory matrix descriptor (wgmma), tiles stored as
    8-row x 16-byte core matrices (kgen.ir.passes.operands). An operand read only from shared
    memory has no fragment layout (b is None)."""

    name: str
    spelling: str  # what the generated source writes: clang builtin (AMD) or PTX (NVIDIA)
    isa_mnemonic: str  # what shows up in the disassembly
    m: int
    n: int
    k: int
    ab_dtype: Literal["bf16", "fp16"]
    acc_dtype: Literal["fp32"]
    scope: Literal["warp", "warpgroup"]
    a: OperandLayout
    b: OperandLayout | None = None
    c: OperandLayout
    a_from: tuple[Source, ...] = ("reg",)
    b_from: tuple[Source, ...] = ("reg",)
    # widths (bytes) of the XOR-swizzled shared layouts the descriptor can name besides the
    # plain core matrices (wgmma: 32, 64 or 128; kgen uses 128 where a tile row allows it)
    shared_swizzle: tuple[Literal[32, 64, 128], ...] = ()
    # the instruction returns before D is written; a wait completes it (wgmma: commit_group and
    # wait_group, PTX ISA). kgen then waits where D is first read (passes/overlap.py)
    asynchronous: bool = False

    @property
    def warps(self) -> int:
        """Warps that issue one instruction together (1, or 4 for a warpgroup)."""
        return 1 << len(self.c.warp)

    @property
    def call(self) -> str:
        """The name the generated source calls it by: its name less the element type, which the
        backend headers and kgen.codegen.wgmma overload on (one source can serve bf16 and fp16)."""
        return self.name.removesuffix("_" + self.ab_dtype)

    def layout(self, operand: Operand) -> Layout:
        """The fragment of operand 'a', 'b' or 'c' ('d' shares the layout of 'c')."""
        if operand not in ("a", "b", "c", "d"):
            raise TargetError(f"unknown operand '{operand}'; accepted operands: a, b, c, d")
        frag = {"a": self.a, "b": self.b, "c": self.c, "d": self.c}[operand]
        if frag is None:
            raise TargetError(f"{self.name} reads operand '{operand}' from shared memory only; it has no register fragment")
        return frag.to_layout()

    @model_validator(mode="after")
    def _check_fragments(self) -> "MatrixInstr":
        if not self.name.endswith("_" + self.ab_dtype):  # `call` takes the type off the name
            raise ValueError(f"{self.name}: an instruction's name ends with its element type, _{self.ab_dtype}")
        if ("reg" in self.b_from) != (self.b is not None):
            raise ValueError(f"{self.name}.b: a fragment layout is given exactly when b_from has 'reg'")
        nwarp = {"warp": 0, "warpgroup": 2}[self.scope]
        for op, want in (("a", (self.m, self.k)), ("b", (self.k, self.n)), ("c", (self.m, self.n))):
            frag: OperandLayout | None = getattr(self, op)
            if frag is None:
                continue
            where = f"{self.name}.{op}"
            if frag.shape != want:
                raise ValueError(f"{where}: shape {list(frag.shape)}, expected {list(want)}")
            if not all(is_pow2(s) for s in want):
                raise ValueError(f"{where}: tile sides must be powers of two")
            if len(frag.warp) != nwarp:
                raise ValueError(f"{where}: a {self.scope}-level instruction has {nwarp} warp bits")
            if len(frag.reg) + len(frag.lane) + len(frag.warp) != log2(want[0] * want[1]):
                raise ValueError(f"{where}: reg + lane + warp bits must address the {want} tile")
            for v in frag.reg + frag.lane:
                if not all(0 <= x < s for x, s in zip(v, want)):
                    raise ValueError(f"{where}: basis vector {list(v)} lies outside the tile")
            if not frag.to_layout().covers_tile():
                raise ValueError(f"{where}: the layout is not a bijection onto the tile")
        return self


def expand_n(entry: dict) -> list[dict]:
    """A descriptor entry whose `n` is a list stands for one instruction per n (wgmma's
    m64nNk16): `{n}` in name and spelling is replaced, and the C fragment, given for the first
    8 columns, gains a register bit per doubling of n, moving 8, 16, ... columns (PTX ISA,
    "Register fragment for accumulator D" of wgmma .m64nNk16: d_i sits in column
    8 * (i // 4) + 2 * (lane % 4) + (i % 2))."""
    if not isinstance(entry.get("n"), list):
        return [entry]
    out = []
    for n in entry["n"]:
        e = {**entry, "n": n, "name": entry["name"].format(n=n), "spelling": entry["spelling"].format(n=n)}
        c = dict(entry["c"])
        base = c["shape"][1]
        if not is_pow2(n) or n < base:
            raise ValueError(f"{entry['name']}: n = {n} must be a power of two of at least {base}")
        c["reg"] = [list(v) for v in c["reg"]] + [[0, base << i] for i in range(log2(n // base))]
        c["shape"] = [c["shape"][0], n]
        e["c"] = c
        out.append(e)
    return out


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
    global_fp32_atomic_vector: int  # most consecutive fp32 elements one global atomic add takes
    shared_bulk_fp32_add: bool = False  # the copy engine adds fp32 rows from shared to global memory
    # fp32 bytes per second (TB/s) each reduction path adds into global memory on the whole device,
    # "atomic" (per-element red/atomic) and "bulk" (shared_bulk_fp32_add), measured under the
    # contention of the attention backward's dq (kgen/bench/reductions.py); the byte model of
    # ir/passes/bulk_reduce.py compares them. Empty where not measured.
    fp32_reduce_tbps: dict[str, float] = {}
    # compiler flags for a kernel that spills: the back end's register-frugal mode, tried (kgen.build)
    # before plainer layouts and smaller tiles
    frugal_register_flags: tuple[str, ...] = ()
    # per-warpgroup register counts a running kernel may move to (sm_90 setmaxnreg): (least,
    # most, step); () where warps cannot give registers to one another
    register_reallocation: tuple[int, ...] = ()
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
                if getattr(mi, op) is not None and len(getattr(mi, op).lane) != log2(self.wave_size):
                    raise ValueError(f"{mi.name}.{op}: needs {log2(self.wave_size)} lane bits")
        return self


def target_from_yaml(path: Path) -> Target:
    """Read and validate one descriptor file; any problem is a TargetError naming the file."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise TargetError(f"cannot read hardware descriptor {path}: {e}") from e
    try:
        return Target.model_validate(_expand_families(data))
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "top level"
        raise TargetError(f"hardware descriptor {path} is invalid at {loc}: {err['msg']}") from e
    except (ValueError, KeyError, TypeError) as e:
        raise TargetError(f"hardware descriptor {path} is invalid: {e}") from e


def _expand_families(data):
    """Instruction entries with a list of n become one entry per n; the family's source is
    each member's source."""
    if not isinstance(data, dict) or not isinstance(data.get("matrix_instrs"), list):
        return data
    data = dict(data)
    sources = dict(data.get("sources") or {})
    instrs = []
    for entry in data["matrix_instrs"]:
        family = isinstance(entry, dict) and isinstance(entry.get("n"), list)
        members = expand_n(entry) if family else [entry]
        instrs += members
        if family:
            src = sources.pop(f"matrix_instrs.{entry['name']}", None)
            if src is not None:
                sources.update({f"matrix_instrs.{m['name']}": src for m in members})
    data["matrix_instrs"], data["sources"] = instrs, sources
    return data


def target_names() -> list[str]:
    return list(_target_names())


@lru_cache(maxsize=None)
def _target_names() -> tuple[str, ...]:
    # the descriptors ship with the package; listing the folder at every op call cost ~150 us
    return tuple(sorted(p.stem for p in DATA_DIR.glob("*.yaml")))


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
