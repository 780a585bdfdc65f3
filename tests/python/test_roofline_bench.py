"""ridge.roofline against hand-computed roofline arithmetic, ridge.bench's trace and memory files."""
import json

import pytest

import ridge.bench as rb
import ridge.roofline as rr


def test_matmul_bound_by_hand():
    chip = rr.load_chip("h100")
    assert "h100" in rr.chip_ids()
    c = rr.matmul(4096, 8192, 8192)
    assert c.flops == 2 * 4096 * 8192 * 8192
    assert c.memory_bytes == 2 * (4096 * 8192 + 8192 * 8192 + 4096 * 8192)
    b = rr.bound(c, chip)
    t_math = c.flops / chip.peak("bf16")
    t_mem = c.memory_bytes / chip.bandwidth()
    assert b.t_math == pytest.approx(t_math)
    assert b.t_memory == pytest.approx(t_mem)
    assert b.t_lower == pytest.approx(max(t_math, t_mem))
    assert b.binding == ("compute" if t_math >= t_mem else "memory")
    assert rr.to_dict(chip)["id"] == "h100"


def test_critical_batch_and_collectives():
    chip = rr.load_chip("h100")
    cb = rr.critical_batch(chip, 8192, 8192)
    bsz = cb["exact_batch"]
    assert rr.bound(rr.matmul(bsz, 8192, 8192), chip).t_math >= rr.bound(rr.matmul(bsz, 8192, 8192), chip).t_memory
    assert rr.bound(rr.matmul(bsz - 1, 8192, 8192), chip).t_math < rr.bound(rr.matmul(bsz - 1, 8192, 8192), chip).t_memory
    ar = rr.all_reduce(1 << 30, 8)
    assert ar.link_bytes == pytest.approx(2 * 7 / 8 * (1 << 30))
    with pytest.raises(ValueError, match="chip"):
        rr.load_chip("no-such-chip")


def test_trace_ranges_write_chrome_json(tmp_path):
    rb.start_recording()

    @rb.traced
    def inner():
        rb.mark("hello", payload=1.5)

    with rb.trace_range("outer"):
        inner()
    rb.stop_recording()
    names = [e.get("name") for e in rb.to_dict()["traceEvents"]]
    assert "outer" in names and "hello" in names and any("inner" in (n or "") for n in names)
    path = tmp_path / "t.json"
    rb.write(str(path))
    assert "traceEvents" in json.loads(path.read_text())
    with pytest.raises(ValueError):
        rb.write(str(tmp_path / "missing-dir" / "t.json"))


def test_memory_snapshot_sees_model_buffers(tmp_path):
    import ridge.model as rm

    rb.memory.record_history()
    m = rm.TransformerLM({"vocab_size": 16, "context_length": 8, "d_model": 32, "num_layers": 1, "num_heads": 2,
                          "d_ff": 64})
    snap = rb.memory.snapshot()
    rb.memory.dump_snapshot(str(tmp_path / "mem.json"))
    rb.memory.stop_recording()
    assert snap["format"] == "ridge-memory-snapshot"
    assert sum(e["bytes"] for e in snap["events"] if e["action"] == "alloc") >= 4 * len(m.names())
    assert json.loads((tmp_path / "mem.json").read_text())["format"] == "ridge-memory-snapshot"
