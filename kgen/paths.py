"""Where kgen's own files are: templates/ and specs/ ship inside the package (see pyproject.toml)."""
from __future__ import annotations

from importlib import resources
from pathlib import Path


def templates_dir() -> Path:
    return Path(str(resources.files("kgen._templates")))


def shipped_specs_dir() -> Path:
    return Path(str(resources.files("kgen._specs")))
