__version__ = "0.1.0"

from .runtime.op import load  # noqa: E402

__all__ = ["load", "__version__"]
