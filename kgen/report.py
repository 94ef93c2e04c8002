"""The table `kgen build` prints: each kernel's threads, tunables and compiled resources."""
from __future__ import annotations

from rich.table import Table


def build_table(built, tg, compiled: bool) -> Table:
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
