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


def test_an_moe_config_reads_the_experts_its_batch_routes_to():
    # moe-tiny (issue 40): D 256, 4 layers, 8 experts of width 256, top-2. Its config dict goes through as it is.
    cfg = rm.preset("moe-tiny", 10000, 256)
    assert (cfg["num_experts"], cfg["top_k"], cfg["d_expert"]) == (8, 2, 256)
    B, E, k, D, L = 4, 8, 2, 256, 4
    r = rr.decode(cfg, batch=B, context=64)
    experts = E * (1 - (1 - k / E) ** B)
    assert r["decode"]["experts_read"] == pytest.approx(experts, rel=1e-12)
    assert r["moe"]["params_total"] == 12470528 and r["moe"]["params_active"] == 7751936
    routed = [m for m in r["decode"]["memory"] if m["name"].startswith("routed experts")]
    assert routed[0]["bytes"] == pytest.approx(L * experts * 3 * D * D * 2, rel=1e-12)
    # A histogram sending every token to the same two experts reads two, at any batch; counts or shares alike.
    two = rr.decode(cfg, batch=64, context=64, expert_histogram=[3, 3, 0, 0, 0, 0, 0, 0])
    assert two["moe"]["routing"] == "histogram" and two["decode"]["experts_read"] == pytest.approx(2)
    assert rr.decode(cfg, batch=64, context=64, expert_histogram=[0.5, 0.5] + [0] * 6) == two
    # A dense config's document has none of the MoE keys.
    assert "moe" not in rr.decode(SMALL, batch=4, context=64)


@pytest.mark.parametrize("config, kwargs, exc, match", [
    ({"num_experts": 8, "top_k": 9}, {}, ValueError, "config: top_k 9"),
    ({"num_experts": 0, "top_k": 2}, {}, ValueError, "config: top_k is set but num_experts is 0"),
    ({"num_experts": 8, "top_k": 2, "moe_layers": [3, 1]}, {}, ValueError, "config: moe_layers"),
    ({"num_experts": 8, "top_k": 2, "moe_layers": [12]}, {}, ValueError, r"config\['moe_layers'\]"),
    ({"num_experts": 8, "top_k": 2, "moe_layers": "all"}, {}, TypeError, r"config\['moe_layers'\]"),
    ({"num_experts": "8", "top_k": 2}, {}, TypeError, r"config\['num_experts'\]"),
    ({"num_experts": 8, "top_k": 2}, {"expert_histogram": [1, 1]}, ValueError, "expert_histogram: 2 values for 8"),
    ({"num_experts": 8, "top_k": 2}, {"expert_histogram": [0.6, 0.4] + [0] * 6}, ValueError,
     "expert_histogram: expert 0 has 0.6"),
    ({"num_experts": 8, "top_k": 2}, {"expert_histogram": "flat"}, TypeError, "expert_histogram"),
    ({"num_experts": 8, "top_k": 2}, {"expert_histogram": [float("nan")] * 8}, ValueError, "expert_histogram"),
    ({}, {"expert_histogram": [1, 1]}, ValueError, "expert_histogram: a routing histogram needs an MoE config"),
])
def test_bad_moe_configs_and_histograms_name_them(config, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        rr.decode(dict(SMALL, **config), **kwargs)
