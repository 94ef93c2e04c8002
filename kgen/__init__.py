"""kgen: YAML op specs -> tile IR -> HIP or CUDA -> PyTorch ops with autograd.

`kgen.load` is imported on first use, so that the command line (which mostly needs no torch)
starts without importing torch.
"""
__version__ = "0.1.0"

__all__ = ["load", "compose", "__version__"]


def __getattr__(name: str):
    if name == "load":
        from .runtime.op import load

        return load
    if name == "compose":
        from .runtime.compose import compose

        return compose
    raise AttributeError(f"module 'kgen' has no attribute {name!r}")
