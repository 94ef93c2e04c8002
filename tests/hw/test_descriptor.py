"""Hardware descriptors: loading, aliases, error wording, sources, strict schema."""
from pathlib import Path

import pytest
import yaml

from kgen.errors import TargetError
from kgen.hw.descriptor import (DATA_DIR, Target, all_targets, load_target, target_from_yaml,
                                targets_table)

NAMES = ["gfx90a", "gfx942", "sm_80", "sm_90"]


def test_all_targets_load_sorted():
    assert [t.name for t in all_targets()] == NAMES


@pytest.mark.parametrize("alias,name", [
    ("gfx942", "gfx942"), ("MI300X", "gfx942"), ("mi300x", "gfx942"), ("GFX942", "gfx942"),
    ("sm_90", "sm_90"), ("sm_90a", "sm_90"), ("H100", "sm_90"), ("h200", "sm_90"),
    ("mi250x", "gfx90a"), ("A100", "sm_80"), ("sm_80", "sm_80"), (" gfx90a ", "gfx90a"),
])
def test_aliases(alias, name):
    assert load_target(alias).name == name


def test_loads_are_cached():
    assert load_target("h100") is load_target("sm_90")


def test_unknown_target_message():
    with pytest.raises(TargetError) as info:
        load_target("xyz")
    assert str(info.value) == "unknown target 'xyz'; accepted targets: gfx90a, gfx942, sm_80, sm_90"


@pytest.mark.parametrize("name", NAMES)
def test_every_number_has_a_source(name):
    t = load_target(name)
    numeric = Target.numeric_fields()
    assert {"num_cus", "lds_bytes_per_block", "peak_bf16_tflops", "wave_size"} <= set(numeric)
    for field in numeric:
        assert t.sources[field].strip(), field
    for mi in t.matrix_instrs:
        assert t.sources[f"matrix_instrs.{mi.name}"].strip()


def test_key_numbers():
    mi300 = load_target("gfx942")
    assert (mi300.num_cus, mi300.xcds, mi300.wave_size) == (304, 8, 64)
    assert mi300.lds_bytes_per_block == 64 * 1024 and mi300.max_arch_vgprs == 256
    h100 = load_target("sm_90")
    assert h100.lds_bytes_per_block == 232448 and h100.compiler_arch == "sm_90a"
    assert "tma" in h100.async_copy and h100.max_regs_per_thread == 255


def _raw(name):
    return yaml.safe_load((DATA_DIR / f"{name}.yaml").read_text())


def _write(tmp_path: Path, data) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_round_trip_of_a_copy(tmp_path):
    assert target_from_yaml(_write(tmp_path, _raw("gfx942"))) == load_target("gfx942")


def test_extra_field_rejected(tmp_path):
    data = _raw("gfx942")
    data["l3_bytes"] = 1
    with pytest.raises(TargetError, match="l3_bytes"):
        target_from_yaml(_write(tmp_path, data))


def test_extra_field_in_a_layout_rejected(tmp_path):
    data = _raw("sm_90")
    data["matrix_instrs"][0]["a"]["swizzle"] = 1
    with pytest.raises(TargetError, match="swizzle"):
        target_from_yaml(_write(tmp_path, data))


def test_missing_source_rejected(tmp_path):
    data = _raw("sm_80")
    del data["sources"]["regs_per_cu"]
    with pytest.raises(TargetError, match="regs_per_cu"):
        target_from_yaml(_write(tmp_path, data))


def test_missing_instruction_source_rejected(tmp_path):
    data = _raw("sm_80")
    del data["sources"]["matrix_instrs.mma_m16n8k16_bf16"]
    with pytest.raises(TargetError, match="mma_m16n8k16_bf16"):
        target_from_yaml(_write(tmp_path, data))


def test_wrong_lane_bits_rejected(tmp_path):
    data = _raw("gfx942")
    c = data["matrix_instrs"][0]["c"]
    c["reg"].append(c["lane"].pop())  # same element count, but only 5 lane bits for a wave of 64
    with pytest.raises(TargetError, match="lane bits"):
        target_from_yaml(_write(tmp_path, data))


def test_non_bijective_layout_rejected(tmp_path):
    data = _raw("sm_90")
    data["matrix_instrs"][0]["b"]["reg"] = [[1, 0], [1, 0]]  # two bits moving the same way
    with pytest.raises(TargetError, match="bijection"):
        target_from_yaml(_write(tmp_path, data))


def test_wrong_shape_rejected(tmp_path):
    data = _raw("sm_90")
    data["matrix_instrs"][0]["c"]["shape"] = [8, 16]
    with pytest.raises(TargetError, match="shape"):
        target_from_yaml(_write(tmp_path, data))


def test_unknown_operand():
    with pytest.raises(TargetError, match="accepted operands"):
        load_target("sm_90").matrix_instrs[0].layout("e")


def test_table_has_a_row_per_target():
    table = targets_table()
    assert table.row_count == len(NAMES)
    assert list(table.columns[0].cells) == NAMES


def _wgmma_entry(data):
    return next(e for e in data["matrix_instrs"] if isinstance(e.get("n"), list))


def test_a_family_over_n_becomes_one_instruction_per_n_with_its_source(tmp_path):
    data = _raw("sm_90")
    entry = _wgmma_entry(data)
    entry["n"] = [64, 16]
    t = target_from_yaml(_write(tmp_path, data))
    names = [mi.name for mi in t.matrix_instrs if mi.ab_dtype == entry["ab_dtype"] and mi.scope == "warpgroup"]
    assert names == ["wgmma_m64n64k16_bf16", "wgmma_m64n16k16_bf16"]
    mi = t.matrix_instr("wgmma_m64n64k16_bf16")
    assert mi.spelling.endswith("m64n64k16.f32.bf16.bf16") and mi.layout("c").shape == (64, 64) and mi.layout("c").nregs == 32
    assert t.sources["matrix_instrs.wgmma_m64n16k16_bf16"] == data["sources"]["matrix_instrs.wgmma_m64n{n}k16_bf16"]


def test_a_family_with_an_n_that_is_no_power_of_two_is_refused(tmp_path):
    data = _raw("sm_90")
    _wgmma_entry(data)["n"] = [64, 24]
    with pytest.raises(TargetError, match="n = 24 must be a power of two of at least 8"):
        target_from_yaml(_write(tmp_path, data))


def test_a_shared_only_operand_has_no_fragment(tmp_path):
    mi = load_target("sm_90").matrix_instr("wgmma_m64n64k16_bf16")
    assert mi.warps == 4 and mi.b is None
    with pytest.raises(TargetError, match="reads operand 'b' from shared memory only"):
        mi.layout("b")
