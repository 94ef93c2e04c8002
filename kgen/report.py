"""The tables the commands print: `kgen build`'s, each kernel's threads, tunables and compiled
resources in the columns of its backend (kgen.backends: registers, shared memory or LDS, spills,
matrix instructions); `kgen check`'s, each output's error against its tolerance."""
from __future__ import annotations

from rich.table import Table

from .backends import backend

# a column's title -> the resource it shows; "shared" is the larger of the planned and the reported
COLUMN_KEYS = {"regs": "registers", "VGPR": "registers", "AGPR": "agprs", "smem": "shared", "LDS": "shared",
               "spills": "spill_bytes", "scratch": "spill_bytes", "occupancy": "occupancy",
               "HMMA": "matrix_instrs", "MFMA": "matrix_instrs"}


def _cell(k, r: dict, key: str) -> str:
    if key == "shared":
        return str(max(k.shared_bytes, r.get("shared_bytes") or 0))
    if key == "matrix_instrs":
        return " ".join(r.get("matrix_instrs") or []) or ("-" if r.get("disasm_tool") else "n/a")
    return str(r.get(key))


def build_table(built, tg, compiled: bool) -> Table:
    columns = backend(tg.backend).report_columns if compiled else ("planned smem",)
    t = Table(title=f"{tg.name} ({tg.backend})")
    for col in ("variant", "kernel", "threads", "tunables", *columns):
        t.add_column(col)
    for bv in built:
        for k in bv.kernels:
            row = [bv.id, k.name, str(k.threads), ",".join(f"{a}={v}" for a, v in bv.tunables.items())]
            if compiled:
                row += [_cell(k, k.resources or {}, COLUMN_KEYS[c]) for c in columns]
            else:
                row.append(str(k.shared_bytes))
            t.add_row(*row)
    return t


def check_table(spec: str, target: str, rows) -> Table:
    """One row per variant and output (kgen.check.emulated.Row): the kernels that write it, its
    max error against the float64 reference, the tolerance and the verdict."""
    t = Table(title=f"{spec} on {target}, in emulation")
    for col in ("variant", "output", "kernels", "max error", "tolerance", "verdict"):
        t.add_column(col)
    for r in rows:
        t.add_row(r.variant, r.output, r.kernels, "-" if r.error is None else f"{r.error:.3g}",
                  "-" if r.tolerance is None else f"{r.tolerance:.3g}", r.verdict)
    return t


def tune_tables(rows: list[dict], tuned=None, entry: dict | None = None) -> Table:
    """`kgen tune`: one variant's candidates with their times (tuned), or `--show`'s entries."""
    from .spec.load import variant_id

    if tuned is not None:
        won = tuned.winner[0] if tuned.winner else None
        t = Table(title=f"{variant_id(tuned.variant)}: bucket {entry['bucket'] if entry else '-'}")
        for col in ("tunables", "ms", "note"):
            t.add_column(col)
        for tunables, ms, note in tuned.times:
            mark = " (fastest)" if tunables == won else " (default)" if tuned.default and tunables == tuned.default[0] else ""
            t.add_row(",".join(f"{k}={v}" for k, v in tunables.items()) + mark, "-" if ms is None else f"{ms:.4f}", note)
        return t
    t = Table(title="tuning database")
    for col in ("spec", "variant", "target", "bucket", "tunables", "ms", "default ms", "speedup", "source", "timed on"):
        t.add_column(col)
    for r in rows:
        bucket = ",".join(f"{k}={v}" for k, v in (r["bucket"] or {}).items())
        t.add_row(r["spec"], r["variant"], r["target"], bucket, ",".join(f"{k}={v}" for k, v in (r["tunables"] or {}).items()),
                  f"{r['ms']:.4f}", f"{r['default_ms']:.4f}", f"{r['speedup']:.2f}" + (" (slower)" if r["regressed"] else ""),
                  r["source"], r["device"] or "-")
    return t
