"""The command line: every usage or OS mistake is one line on stderr and the right exit code.

Run in process (kgen.cli.main, SystemExit caught) except where the process itself is the point:
Ctrl-C and killed parents (tests/cli/test_warm_signals.py), the import of torch.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgen import __version__
from kgen.cli import main

REPO = Path(__file__).resolve().parents[2]
MATMUL = str(REPO / "specs" / "matmul.yaml")
COMMANDS = "build, warm, check, inspect, list, targets, cache, tune"
TARGETS = "gfx90a, gfx942, sm_80, sm_90"


def kgen(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def one_line_error(capsys, argv: list[str], code: int) -> str:
    got, _, err = kgen(capsys, *argv)
    assert got == code, err
    assert err.endswith("\n") and err.count("\n") == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    return err[len("error: "):-1]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "cache"))


USAGE = [
    ([], f"kgen needs a command; accepted: {COMMANDS} (see kgen --help)"),
    (["frobnicate"], f"unknown command 'frobnicate'; accepted: {COMMANDS} (see kgen --help)"),
    (["--frob"], "kgen: unrecognized arguments: --frob (see kgen --help)"),
    (["build"], "kgen build needs a spec file: kgen build SPEC --target TARGET"),
    (["build", MATMUL], f"kgen build needs --target; accepted: {TARGETS}"),
    (["build", MATMUL, "-t", "sm_99"],
     f"kgen build: argument --target/-t: unknown target 'sm_99'; accepted targets: {TARGETS} (see kgen build --help)"),
    (["build", MATMUL, "-t", "sm_90", "--foo"], "kgen build: unrecognized arguments: --foo (see kgen build --help)"),
    (["build", MATMUL, "-t", "sm_90", "-v", "dtype"],
     "kgen build: argument --variant/-v: takes axis=value (e.g. dtype=bf16), got 'dtype' (see kgen build --help)"),
    (["build", MATMUL, "-t", "sm_90", "-v", "dtypo=bf16"], "unknown variant axis 'dtypo'; axes of matmul: dtype"),
    (["build", MATMUL, "-t", "sm_90", "-v", "dtype=fp64"], "unknown value 'fp64' for variant axis 'dtype'; accepted: bf16, fp16"),
    (["warm"], "kgen warm needs at least one spec file: kgen warm SPEC... [--target TARGET]"),
    (["warm", MATMUL, "-t", "sm_90", "-j", "abc"],
     "kgen warm: argument --jobs/-j: takes a positive whole number, got 'abc' (see kgen warm --help)"),
    (["warm", MATMUL, "-t", "sm_90", "-j", "0"],
     "kgen warm: argument --jobs/-j: takes a positive whole number, got '0' (see kgen warm --help)"),
    (["warm", MATMUL, "-t", "sm_90", "-v", "dtypo=bf16"], "unknown variant axis 'dtypo'; axes of the given specs: dtype"),
    (["inspect", MATMUL, "-t", "sm_90", "-k", "5"], "--kernel 5 is not a kernel of matmul; accepted: 0 or a name: fwd"),
    (["inspect", MATMUL], f"kgen inspect needs --target; accepted: {TARGETS}"),
    (["tune", MATMUL, "-s", "M=64", "-S", "prefix=inf"],
     "kgen tune: argument --scalar/-S: takes NAME=VALUE with a finite number (e.g. prefix=2048), got 'prefix=inf' "
     "(see kgen tune --help)"),
    (["cache"], "kgen cache takes info or clear"),
    (["cache", "wipe"], "kgen cache takes info or clear, got 'wipe'"),
]


@pytest.mark.parametrize("argv, message", USAGE, ids=[" ".join(a[:1] + a[2:]) or "(none)" for a, _ in USAGE])
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, message):
    assert one_line_error(capsys, argv, 2) == message


def test_warm_without_gpu_needs_a_target(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: warm picks its target")
    assert one_line_error(capsys, ["warm", MATMUL], 2) == f"kgen warm needs --target on a machine without a GPU; accepted: {TARGETS}"


def test_version_and_help(capsys):
    code, out, err = kgen(capsys, "--version")
    assert (code, out, err) == (0, f"kgen {__version__}\n", "")
    code, out, _ = kgen(capsys, "--help")
    assert code == 0 and all(c in out for c in COMMANDS.split(", "))
    code, out, _ = kgen(capsys, "build", "--help")
    assert code == 0 and "--no-compile" in out


def test_missing_spec_file(capsys, tmp_path):
    missing = tmp_path / "nope.yaml"
    assert one_line_error(capsys, ["build", str(missing), "-t", "sm_90"], 1) == f"cannot read spec file {missing}: No such file or directory"


def test_spec_that_is_not_utf8(capsys, tmp_path):
    spec = tmp_path / "latin1.yaml"
    spec.write_bytes(Path(MATMUL).read_bytes().replace(b"summary: ", b"summary: caf\xe9 ", 1))
    line = spec.read_bytes()[:spec.read_bytes().index(b"\xe9")].count(b"\n") + 1
    assert one_line_error(capsys, ["build", str(spec), "-t", "sm_90", "--no-compile"], 1) == \
        f"{spec}:{line}:13: a spec must be UTF-8 text; byte 0xe9 is not"


def test_duplicate_yaml_key(capsys, tmp_path):
    spec = tmp_path / "dup.yaml"
    text = Path(MATMUL).read_text()
    spec.write_text(text.replace("summary:", "name: again\nsummary:", 1))
    first = text.splitlines().index(next(ln for ln in text.splitlines() if ln.startswith("name:"))) + 1
    dup = text.splitlines().index(next(ln for ln in text.splitlines() if ln.startswith("summary:"))) + 1
    assert one_line_error(capsys, ["build", str(spec), "-t", "sm_90", "--no-compile"], 1) == \
        f"{spec}:{dup}:1: duplicate key 'name' (first given at line {first}); give each key once"


@pytest.fixture
def no_build(monkeypatch):
    """Fails the test if anything is lowered or compiled: the checks must come first."""
    import kgen.build

    def refuse(*a, **k):
        raise AssertionError("built before the arguments were checked")

    monkeypatch.setattr(kgen.build, "build_spec", refuse)


def test_out_onto_a_file(capsys, tmp_path, no_build):
    f = tmp_path / "afile"
    f.write_text("x")
    assert one_line_error(capsys, ["build", MATMUL, "-t", "sm_90", "-o", str(f)], 1) == \
        f"--out {f} is a file, not a folder; give a folder to write the sources into"
    assert one_line_error(capsys, ["build", MATMUL, "-t", "sm_90", "-o", str(f / "sub")], 1) == \
        f"cannot create --out {f / 'sub'}: {f} is a file, not a folder"
    assert f.read_text() == "x"


def test_out_in_a_read_only_folder(capsys, tmp_path, no_build):
    if os.geteuid() == 0:  # root writes through permission bits: use a folder the kernel refuses to root
        parent = Path("/sys")
        if not parent.is_dir() or os.access(parent, os.W_OK) and _can_create(parent):
            pytest.skip("no folder here refuses root")
    else:
        parent = tmp_path / "ro"
        parent.mkdir()
        parent.chmod(0o555)
    out = parent / "kgen-out"
    assert one_line_error(capsys, ["build", MATMUL, "-t", "sm_90", "-o", str(out)], 1) == \
        f"cannot write into --out {out}: Permission denied ({parent}); give a folder you can write to"
    assert not out.exists()


def _can_create(folder: Path) -> bool:
    try:
        (folder / ".kgen-test").mkdir()
    except OSError:
        return False
    (folder / ".kgen-test").rmdir()
    return True


def test_build_without_a_compiler_fails_and_writes_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_HIP_CLANG", str(tmp_path / "no-clang"))
    out = tmp_path / "gen"
    msg = one_line_error(capsys, ["build", MATMUL, "-t", "gfx942", "-o", str(out)], 1)
    assert msg.startswith(f"cannot compile for gfx942: no HIP compiler found (KGEN_HIP_CLANG={tmp_path / 'no-clang'} is not")
    assert msg.endswith("; pass --no-compile to write the sources only")
    assert not out.exists()
    code, stdout, err = kgen(capsys, "build", MATMUL, "-t", "gfx942", "-o", str(out), "--no-compile")
    assert code == 0 and err == "" and (out / "matmul" / "gfx942" / "manifest.json").is_file()


def test_warm_without_a_compiler(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_HIP_CLANG", str(tmp_path / "no-clang"))
    msg = one_line_error(capsys, ["warm", MATMUL, "-t", "gfx942"], 1)
    assert msg.startswith("cannot compile for gfx942: no HIP compiler found") and msg.endswith("install the compiler first")


def test_list_and_cache(capsys, tmp_path):
    code, out, err = kgen(capsys, "list")
    assert code == 0 and "matmul.yaml" in out and err == ""
    assert one_line_error(capsys, ["list", str(tmp_path / "none")], 1) == f"{tmp_path / 'none'} is not a folder; give a folder of .yaml specs"
    code, out, _ = kgen(capsys, "cache", "info")
    assert code == 0 and str(tmp_path / "cache") in out and "entries  0," in out
    code, out, _ = kgen(capsys, "cache", "clear")
    assert code == 0 and out == f"removed 0 entries from {tmp_path / 'cache'}\n"


def test_commands_that_need_no_torch_do_not_import_it(tmp_path):
    """kgen's command line starts without torch (and without torch's NumPy warning)."""
    code = ("import sys; from kgen.cli import run; run(['build', %r, '-t', 'sm_90', '--no-compile', '-o', %r]); "
            "run(['list']); run(['targets']); print('torch' in sys.modules)") % (MATMUL, str(tmp_path / "gen"))
    env = {**os.environ, "KGEN_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "False"
    assert "NumPy" not in r.stderr


def test_warm_fills_the_cache(capsys, tmp_path):
    """The real thing, with the real compiler: two variants built by two workers, then cached."""
    from kgen.knobs import knobs
    from kgen.backends import available

    if not available("hip"):
        if knobs().ci:
            pytest.fail("CI=true but no HIP compiler was found")
        pytest.skip("no HIP compiler (clang-19) here")
    code, out, err = kgen(capsys, "warm", MATMUL, "-t", "gfx942", "-j", "2")
    assert (code, err) == (0, "") and out.splitlines()[-1] == "2 variants cached for gfx942"
    code, out, _ = kgen(capsys, "cache", "info")
    assert "entries  4," in out  # the 2 variants and the 2 code objects (kgen.codeobjects) they launch


def test_inspect_prints_the_form_that_ships(capsys, monkeypatch):
    """A kernel that spills ships in another form (plain layouts here: a stand-in compiler says
    every swizzled source spills); inspect prints that form's IR, not the first lowering's."""
    import re

    from kgen import backends, driver

    swizzled = re.compile(r"wgmma_desc\([^;]*, 1\);")

    def fake_compile(bk, target, extra_flags=(), objects=None):
        bk.resources = {"spill_bytes": 64 if swizzled.search(bk.text) else 0}

    monkeypatch.setattr(driver, "compile_built", fake_compile)
    monkeypatch.setattr(backends, "available", lambda name: True)
    spec = str(REPO / "specs" / "fa2_fwd.yaml")
    code, out, err = kgen(capsys, "inspect", spec, "-t", "sm_90", "-v", "dtype=bf16", "-v", "head_dim=64", "-v", "causal=false")
    assert (code, err) == (0, "")
    header = " ".join(out.split("== after parse")[0].split())
    assert "swizzle=False" in header and "(as compiled here)" in header
    assert "sw128" not in out.split("== after place_dot_operands")[1]
    monkeypatch.setattr(backends, "available", lambda name: False)  # no compiler: the sources-only form
    code, out, _ = kgen(capsys, "inspect", spec, "-t", "sm_90", "-v", "dtype=bf16", "-v", "head_dim=64", "-v", "causal=false")
    assert code == 0 and "swizzle=True" in " ".join(out.split("== after parse")[0].split())
    assert "sw128" in out.split("== after place_dot_operands")[1]
