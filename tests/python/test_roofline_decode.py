"""ridge.roofline.decode: the generation roofline from Python, against the closed forms of a decode step,
the critical batch's crossing, and ValueError naming the argument for bad input."""
import pytest

import ridge.model as rm
import ridge.roofline as rr

SMALL = rm.preset("small", 10000, 256)  # D 768, F 3072, 12 layers, 12 heads


def test_decode_step_against_the_closed_forms():
    r = rr.decode(SMALL, batch=4, context=256, chip="h100")
    d = r["decode"]
    B, C, L, D, F, V = 4, 256, 12, 768, 3072, 10000
    linears = L * (4 * D * D + 3 * D * F)
    assert d["flops"] == 2 * B * linears + 2 * B * D * V + 4 * B * D * C * L
    assert d["bytes"]["kv_read"] == B * C * L * 2 * D * 2
    assert d["bytes"]["kv_write"] == B * L * 2 * D * 2
    assert d["bytes"]["weights"] == 2 * linears + 4 * (2 * L + 1) * D + 2 * V * D + 2 * B * D
    total = d["bytes"]["total"]
    assert total == sum(d["bytes"][k] for k in ("weights", "kv_read", "kv_write", "activations"))
    assert d["t_memory_s"] == pytest.approx(total / 3.35e12, rel=1e-12)
    assert d["t_lower_s"] == max(d["t_math_s"], d["t_memory_s"])
    assert d["tokens_per_s"] == pytest.approx(B / d["t_lower_s"], rel=1e-12)
    assert d["binding"] == "memory"
    assert r["dtypes"] == {"weights": "bf16", "head": "bf16", "embedding": "bf16", "kv": "bf16", "activations": "bf16"}
    assert r["shape"]["kv_heads"] == 12
    assert r["prefill"] is None and r["sweep"] == []
    # A Chip object and its name give the same document.
    assert rr.decode(SMALL, batch=4, context=256, chip=rr.load_chip("h100")) == r


def test_critical_batch_is_where_the_sweep_turns_compute_bound():
    cfg = rm.preset("2.7B", 10000, 1024)
    r = rr.decode(cfg, batch=8, context=16, prompt=128, sweep=True)
    crit = r["critical_batch"]["batch"]
    assert crit is not None
    for row in r["sweep"]:
        assert row["binding"] == ("compute" if row["batch"] >= crit else "memory")
    assert r["sweep"][-1]["batch"] >= crit > r["sweep"][-2]["batch"]
    # Between the crossing's neighbours, evaluated one batch at a time.
    assert rr.decode(cfg, batch=crit, context=16)["decode"]["binding"] == "compute"
    assert rr.decode(cfg, batch=crit - 1, context=16)["decode"]["binding"] == "memory"
    # fp8 weights keep a bf16 head by default.
    f = rr.decode(cfg, batch=8, context=16, weights="fp8")
    assert f["dtypes"]["head"] == "bf16"
    assert f["decode"]["flops_parts"][0]["compute_dtype"] == "fp8"
    assert r["prefill"]["prompt"] == 128
    # At the full context the KV cache keeps it memory-bound at any batch.
    never = rr.decode(cfg, context=1024)["critical_batch"]
    assert never["batch"] is None
    assert never["limit_intensity"] < never["ridge_intensity"]


def test_grouped_query_attention_shrinks_the_kv_cache():
    gqa = dict(SMALL, num_kv_heads=3)
    full = rr.decode(SMALL, batch=2, context=100)["decode"]["bytes"]["kv_read"]
    assert rr.decode(gqa, batch=2, context=100)["decode"]["bytes"]["kv_read"] * 4 == full


@pytest.mark.parametrize("kwargs, name", [
    ({"context": 257}, "context"),
    ({"context": 0}, "context"),
    ({"batch": 0}, "batch"),
    ({"prompt": -1}, "prompt"),
    ({"weights": "fp16"}, "weights"),
    ({"head": "int8"}, "head"),
    ({"embedding": "fp8"}, "embedding"),
    ({"kv": "fp8"}, "kv"),
    ({"chip": "nosuchchip"}, "chip"),
    ({"level": "l3"}, "level"),
])
def test_bad_values_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        rr.decode(SMALL, **kwargs)


def test_bad_configs_name_the_config():
    with pytest.raises(TypeError, match="config"):
        rr.decode([1, 2])
    with pytest.raises(ValueError, match="config: missing 'd_ff'"):
        rr.decode({k: v for k, v in SMALL.items() if k != "d_ff"})
    with pytest.raises(ValueError, match="config: num_kv_heads 5"):
        rr.decode(dict(SMALL, num_kv_heads=5))
    with pytest.raises(TypeError, match="sweep"):
        rr.decode(SMALL, sweep="yes")
