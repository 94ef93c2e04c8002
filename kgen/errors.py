"""User-facing errors: one sentence saying what was wrong and what is accepted.

A KgenError is caught by the CLI and printed without a traceback. When the error comes from a
spec, `where` names the file:line:col in the user's YAML so that an editor can jump to it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLoc:
    """A position in a spec file: 1-based line and column, as editors count them."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class KgenError(Exception):
    """Base of every error kgen reports to a user."""

    exit_code = 1  # what the command line exits with (kgen.cli)

    def __init__(self, message: str, where: SourceLoc | None = None):
        self.message = message
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)

    def __reduce__(self):  # pickles whole (a build worker's error reaches the parent with its fields)
        return (type(self), (self.message, self.where), dict(self.__dict__))


class UsageError(KgenError):
    """A command-line mistake: a missing or malformed argument, an unknown option or variant axis."""

    exit_code = 2


class SpecError(KgenError):
    """A spec is malformed: bad YAML, a wrong field, a tile program that does not type-check."""


class DoesNotFit(SpecError):
    """A tunable choice the target cannot hold: the tuning search (kgen.build) takes the next one.

    `resource` names what ran out ("threads", "shared_memory", "matrix_instruction", "warp_split"); `needed`
    and `available` are its amounts where it has them (bytes of shared memory)."""

    def __init__(self, message: str, where: SourceLoc | None = None, *, resource: str = "",
                 needed: int | None = None, available: int | None = None):
        super().__init__(message, where)
        self.resource, self.needed, self.available = resource, needed, available


class TargetError(KgenError):
    """An unknown target, or a GPU that no code object was built for."""


class ToolchainError(KgenError):
    """A compiler is missing, or it rejected the generated source."""


class LaunchError(KgenError):
    """A wrong tensor at call time, or a failed load or launch on the GPU."""
