"""Where kgen's own files are: templates/ and specs/ ship inside the package (see pyproject.toml)."""
from __future__ import annotations

from importlib import resources
from pathlib import Path


def _packaged(name: str, folder: str) -> Path:
    # In a source checkout (kgen/ beside pyproject.toml), its own folder: an editable install of
    # another checkout maps kgen._templates / kgen._specs into that other tree, which would mix
    # one checkout's kgen with another's templates and specs.
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / folder).is_dir():
        return root / folder
    try:
        return Path(str(resources.files(name)))
    except ModuleNotFoundError:  # run from a checkout that was never installed
        return Path(__file__).resolve().parent.parent / folder


def templates_dir() -> Path:
    return _packaged("kgen._templates", "templates")


def shipped_specs_dir() -> Path:
    return _packaged("kgen._specs", "specs")


def display_path(path: Path) -> str:
    """A spec's path as written in generated files: relative to the working directory when
    under it, so generated/ does not depend on where the repository is checked out."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
