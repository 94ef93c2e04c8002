"""Keep only the arguments a kernel reads: the tensors its memory ops name, the sizes its
program and those tensors' shapes use, the scalars it reads.

A spec declares its tensors, sizes and scalars once for all of its kernels, and each kernel
uses a few of them (the SSD backward's chunk cumsum reads 3 of its 20 tensors). A parameter a
kernel never reads still costs a line of its source and bytes of its launch; dropped here, the
kernel's argument lists (Kernel.tensors, sizes, scalars) are what the runtime passes it, in the
spec's order (kgen.runtime.op builds each kernel's arguments from them).
"""
from __future__ import annotations

import ast

from ...hw.descriptor import Target
from ...options import CompileOptions
from ..core import Kernel, use_counts, walk

MEMORY_OPS = ("load", "store", "atomic_add", "copy_async", "gather", "scatter")
ARGUMENT_OPS = ("size", "scalar_arg")


def keep_used_arguments(k: Kernel, target: Target, options: CompileOptions) -> Kernel:
    uses = use_counts(k.body)
    # a size or scalar the parse read in but nothing uses
    k.body.ops = [op for op in k.body.ops if not (op.kind in ARGUMENT_OPS and not uses.get(id(op.result)))]
    tensors = {op.attrs["tensor"] for op in walk(k.body) if op.kind in MEMORY_OPS}
    sizes = {op.attrs["name"] for op in walk(k.body) if op.kind == "size"}
    for name in tensors:  # bounds tests and strides name the shape's sizes
        for dim in k.tensors[name].shape:
            sizes |= _names(dim)
    scalars = {op.attrs["name"] for op in walk(k.body) if op.kind == "scalar_arg"}
    k.tensors = {n: t for n, t in k.tensors.items() if n in tensors}
    k.sizes = [s for s in k.sizes if s in sizes]
    k.scalars = [s for s in k.scalars if s in scalars]
    return k


def _names(dim: str | int) -> set[str]:
    if isinstance(dim, int):
        return set()
    return {node.id for node in ast.walk(ast.parse(str(dim), mode="eval")) if isinstance(node, ast.Name)}
