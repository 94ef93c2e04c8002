"""kgen.bench.machine_code: a re-spelled source with the same instructions passes, a changed
computation is reported (compiled for gfx942 with clang, which CI installs)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kgen.backends import available
from kgen.bench.machine_code import elf_sections, main

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not available("hip"), reason="needs clang with the AMDGPU target")


def _build(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "kgen", "build", "specs/softmax.yaml", "--target", "gfx942",
                    "--variant", "dtype=fp32", "--variant", "ROW=1024", "--no-compile", "--out", str(out)], cwd=REPO, check=True,
                   capture_output=True)
    return out / "softmax" / "gfx942"


def _rename(folder: Path, edit) -> None:
    """Rewrite the build's one kernel with `edit` under a new file name, as a new build would."""
    manifest = json.loads((folder / "manifest.json").read_text())
    (old,) = manifest["kernels"]
    new = old.replace("__", "__x")
    (folder / new).write_text(edit((folder / old).read_text()))
    (folder / old).unlink()
    (folder / "manifest.json").write_text((folder / "manifest.json").read_text().replace(old, new))


def test_same_instructions_pass_and_a_changed_computation_fails(tmp_path, capsys):
    before = _build(tmp_path / "a")
    respelled = tmp_path / "b"
    shutil.copytree(tmp_path / "a", respelled)
    _rename(respelled / "softmax" / "gfx942", lambda s: s.replace("\n", "\n// a comment\n", 5))
    changed = tmp_path / "c"
    shutil.copytree(tmp_path / "a", changed)
    _rename(changed / "softmax" / "gfx942", lambda s: s.replace("kg::exp_(", "kg::exp2_(", 1))
    assert main([str(tmp_path / "a"), str(respelled)]) == 0
    assert "1 new source with the same instructions, 0 differ" in capsys.readouterr().out
    assert main([str(tmp_path / "a"), str(changed)]) == 1
    assert "differs: softmax gfx942 dtype-fp32_ROW-1024 softmax_fwd" in capsys.readouterr().out
    assert before.exists()


def test_elf_sections_reads_a_section_table():
    with pytest.raises(ValueError, match="not an ELF64 file"):
        elf_sections(b"not an object")
