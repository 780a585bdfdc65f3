"""Every public function of the ridge package against arguments of the wrong type or out of range: the
only exceptions are TypeError (a wrong type) and ValueError (a wrong value), and the message names the
argument. Each function is first called with good arguments (so the sweep reaches every argument), then
with one argument at a time replaced by each hostile value.

Also the regressions of issue 20: token ids of 2**32 and above are refused before they narrow (case 6),
flash_attn_func with float16 is a TypeError naming q (case 8), and TransformerLM.load of a damaged
checkpoint leaves every weight as it was (case 4)."""
import json
import struct

import numpy as np
import pytest

import ridge
import ridge.attention as ra
import ridge.bench as rb
import ridge.gemm as rg
import ridge.model as rm
import ridge.roofline as rr
from ridge import _arrays

ml_dtypes = pytest.importorskip("ml_dtypes")

CFG = {"vocab_size": 23, "context_length": 8, "d_model": 32, "num_layers": 1, "num_heads": 2, "d_ff": 48}


def f32(*shape):
    return np.ones(shape, np.float32)


def bf16(*shape):
    return np.ones(shape, ml_dtypes.bfloat16)


def fp8(*shape):
    return np.zeros(shape, ml_dtypes.float8_e4m3fn)


def i32(*values):
    return np.array(values, np.int32)


def noncontiguous():
    return np.ones((8, 8), np.float32)[:, ::2]


HOSTILE = {
    "None": None,
    "str": "x",
    "float": 1.5,
    "list": [1, 2],
    "bytes": b"\xff\xfe",
    "surrogates": "\udcff",
    "bool": True,
    "complex": 1j,
    "negative": -1,
    "zero": 0,
    "2**32+1": 2**32 + 1,
    "2**63": 2**63,
    "2**64": 2**64,
    "nan": float("nan"),
    "float16": np.ones((2, 2), np.float16),
    "int8": np.ones((2, 2), np.int8),
    "bool array": np.ones((2, 2), bool),
    "complex array": np.ones((2, 2), np.complex64),
    "object array": np.array([None, 1], dtype=object),
    "0-d": np.array(1.0, np.float32),
    "5-d": np.ones((1, 1, 1, 1, 1), np.float32),
    "empty": np.ones((0, 0), np.float32),
    "non-contiguous": noncontiguous(),
    "big-endian": np.ones((2, 2), ">f4"),
}


def model():
    return rm.TransformerLM(CFG, batch=1, seq=4)


def chip():
    return rr.load_chip("h100")


def sweep_cases():
    """name -> (function, good keyword arguments, {argument: names the message may use instead})."""
    m = model()
    q = f32(1, 4, 2, 16)
    o, lse = ra.flash_attn_forward(q, q, q)
    toks = np.zeros((1, 4), np.int64)
    c = rr.matmul(8, 8, 8)
    cases = {
        "ridge.set_num_threads": (ridge.set_num_threads, {"n": ridge.get_num_threads()}, {}),
        "ridge.set_isa": (ridge.set_isa, {"isa": ridge.get_isa()}, {}),
        "gemm.set_num_threads": (rg.set_num_threads, {"n": ridge.get_num_threads()}, {}),
        "gemm.ceil_div": (rg.ceil_div, {"x": 7, "y": 2}, {}),
        "gemm.per_token_cast_to_fp8": (rg.per_token_cast_to_fp8, {"x": f32(4, 128), "use_ue8m0": False}, {}),
        "gemm.per_block_cast_to_fp8": (rg.per_block_cast_to_fp8, {"x": f32(4, 128)}, {}),
        "gemm.fp8_gemm_nt": (rg.fp8_gemm_nt, {"a": (fp8(4, 128), f32(4, 1)), "b": (fp8(8, 128), f32(1, 1))},
                             {"a": ("a", "sfa"), "b": ("b", "sfb")}),
        "gemm.m_grouped_fp8_gemm_nt_masked": (
            rg.m_grouped_fp8_gemm_nt_masked,
            {"a": (fp8(1, 4, 128), f32(1, 4, 1)), "b": (fp8(1, 8, 128), f32(1, 1, 1)), "d": bf16(1, 4, 8),
             "masked_m": i32(4), "expected_m": 4},
            {"a": ("a", "sfa"), "b": ("b", "sfb")}),
        "gemm.m_grouped_fp8_gemm_nt_contiguous": (
            rg.m_grouped_fp8_gemm_nt_contiguous,
            {"a": (fp8(64, 128), f32(64, 1)), "b": (fp8(1, 8, 128), f32(1, 1, 1)), "d": bf16(64, 8),
             "m_indices": i32(*[0] * 64)},
            {"a": ("a", "sfa"), "b": ("b", "sfb")}),
        "gemm.get_mk_alignment_for_contiguous_layout": (rg.get_mk_alignment_for_contiguous_layout, {}, {}),
        "gemm.k_grouped_fp32_gemm_tn_contiguous": (
            rg.k_grouped_fp32_gemm_tn_contiguous,
            {"a": f32(64, 4), "b": f32(64, 8), "d": f32(2, 4, 8), "k_indices": i32(*[0] * 64), "c": f32(2, 4, 8)}, {}),
        "gemm.k_grouped_bf16_gemm_tn_contiguous": (
            rg.k_grouped_bf16_gemm_tn_contiguous,
            {"a": bf16(64, 4), "b": bf16(64, 8), "d": f32(2, 4, 8), "k_indices": i32(*[1] * 64)}, {}),
        "attention.flash_attn_func": (ra.flash_attn_func, {"q": q, "k": q, "v": q, "dropout_p": 0.0,
                                                           "softmax_scale": 0.25, "causal": True}, {}),
        "attention.flash_attn_forward": (ra.flash_attn_forward, {"q": q, "k": q, "v": q, "causal": False}, {}),
        "attention.flash_attn_backward": (ra.flash_attn_backward, {"do": q, "q": q, "k": q, "v": q, "o": o,
                                                                   "lse": lse}, {}),
        "attention.flash_attn_with_kvcache": (
            ra.flash_attn_with_kvcache,
            {"q": q, "k_cache": f32(1, 8, 2, 16), "v_cache": f32(1, 8, 2, 16), "k": None, "v": None,
             "cache_seqlens": i32(4), "block_table": None, "softmax_scale": None, "causal": True, "num_splits": 0,
             "return_softmax_lse": False},
            {"k": ("k", "v"), "v": ("k", "v")}),
        "attention.kvcache_num_splits": (ra.kvcache_num_splits, {"seqlen_k": 100, "units": 1, "threads": 2}, {}),
        "attention.attention_flops": (ra.attention_flops, {"batch": 1, "heads": 2, "n_q": 4, "n_k": 4, "d": 16,
                                                           "causal": True, "backward": False}, {}),
        "model.preset": (rm.preset, {"name": "tiny", "vocab_size": 100, "context_length": 16}, {}),
        "model.TransformerLM": (rm.TransformerLM, {"config": dict(CFG), "batch": 1, "seq": 4, "lr_max": 1e-3,
                                                   "warmup_steps": 0, "seed": 1, "precision": "fp32"}, {}),
        "TransformerLM.forward": (m.forward, {"inputs": toks, "targets": toks}, {}),
        "TransformerLM.__call__": (m.__call__, {"inputs": toks}, {}),
        "TransformerLM.step": (m.step, {"inputs": toks, "targets": toks}, {}),
        "TransformerLM.train": (lambda data, log_every, on_log: model().train(data, 2, log_every=log_every,
                                                                              on_log=on_log),
                                {"data": np.arange(20) % 23, "log_every": 1, "on_log": None}, {}),
        "TransformerLM.param": (m.param, {"name": "lm_head.weight"}, {}),
        "TransformerLM.grad": (m.grad, {"name": "lm_head.weight"}, {}),
        "TransformerLM.load_state_dict": (m.load_state_dict, {"state_dict": {"ln_final.weight": f32(32)},
                                                              "strict": False}, {}),
        "roofline.load_chip": (rr.load_chip, {"name_or_path": "h100"}, {}),
        "roofline.matmul": (rr.matmul, {"b": 8, "d": 8, "f": 8, "x": "bf16"}, {}),
        "roofline.attention": (rr.attention, {"batch": 1, "heads": 2, "seq_q": 8, "seq_kv": 8, "head_dim": 16}, {}),
        "roofline.fp8_gemm": (rr.fp8_gemm, {"m": 8, "n": 8, "k": 8}, {}),
        "roofline.grouped_gemm_contiguous": (rr.grouped_gemm_contiguous, {"m_per_group": [8, 8], "n": 8, "k": 8},
                                             {}),
        "roofline.grouped_gemm_masked": (rr.grouped_gemm_masked, {"max_m": 8, "valid_m": [4, 8], "n": 8, "k": 8}, {}),
        "roofline.all_reduce": (rr.all_reduce, {"bytes": 1024, "chips": 4, "dtype": "bf16"}, {}),
        "roofline.all_gather": (rr.all_gather, {"bytes": 1024, "chips": 4}, {}),
        "roofline.reduce_scatter": (rr.reduce_scatter, {"bytes": 1024, "chips": 4}, {}),
        "roofline.bound": (rr.bound, {"cost": c, "chip": chip(), "level": ""}, {}),
        "roofline.describe": (rr.describe, {"cost": c, "bound": rr.bound(c, chip()), "chip": chip()}, {}),
        "roofline.critical_batch": (rr.critical_batch, {"chip": chip(), "d": 1024, "f": 1024}, {}),
        "roofline.critical_split_d": (rr.critical_split_d, {"chip": chip(), "chips": 8}, {}),
        "roofline.to_dict": (rr.to_dict, {"obj": c}, {}),
        "roofline.decode": (rr.decode, {"config": dict(CFG), "batch": 2, "context": 4, "weights": "bf16",
                                        "head": "bf16", "embedding": "bf16", "kv": "bf16", "chip": "h100",
                                        "level": "", "prompt": 2, "sweep": False}, {}),
        "bench.start_recording": (rb.start_recording, {"max_events": 100}, {}),
        "bench.set_thread_name": (rb.set_thread_name, {"name": "t"}, {}),
        "bench.push": (rb.push, {"name": "r"}, {}),
        "bench.start_range": (rb.start_range, {"name": "r", "colour": 0}, {}),
        "bench.mark": (rb.mark, {"name": "m", "category": "c", "payload": 1.0}, {}),
        "bench.trace_range": (lambda name: rb.trace_range(name).__enter__(), {"name": "r"}, {}),
        "bench.memory.record_history": (rb.memory.record_history, {"max_entries": 10}, {}),
    }
    for kind, make in (("fp32", f32), ("bf16", bf16)):
        for layout in ("nt", "nn"):
            fn = getattr(rg, f"m_grouped_{kind}_gemm_{layout}_contiguous")
            cases[f"gemm.{fn.__name__}"] = (fn, {"a": make(64, 8), "b": make(2, 8, 8), "d": make(64, 8),
                                                 "m_indices": i32(*[1] * 64)}, {})
        fn = getattr(rg, f"m_grouped_{kind}_gemm_nt_masked")
        cases[f"gemm.{fn.__name__}"] = (fn, {"a": make(2, 4, 8), "b": make(2, 8, 8), "d": f32(2, 4, 8),
                                             "masked_m": i32(4, 1), "expected_m": 4}, {})
    for layout in ("nt", "nn", "tn", "tt"):
        for kind, make in (("fp32", f32), ("bf16", bf16)):
            fn = getattr(rg, f"{kind}_gemm_{layout}")
            a = make(4, 8) if layout[0] == "n" else make(8, 4)
            b = make(8, 8)
            cases[f"gemm.{fn.__name__}"] = (fn, {"a": a, "b": b, "d": f32(4, 8), "c": f32(4, 8)}, {})
    return cases


CASES = sweep_cases()


@pytest.fixture(autouse=True)
def _clean():
    yield
    ridge.reset_isa()
    rb.stop_recording()
    rb.memory.stop_recording()
    rb.clear()


@pytest.mark.parametrize("name", sorted(CASES))
def test_good_arguments_work(name):
    fn, kwargs, _ = CASES[name]
    fn(**kwargs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_arguments_raise_type_or_value_error_naming_them(name, tmp_path):
    fn, kwargs, aliases = CASES[name]
    problems = []
    for arg in kwargs:
        for label, bad in HOSTILE.items():
            if isinstance(kwargs[arg], bool) and isinstance(bad, bool):
                continue  # a valid value of a flag
            call = dict(kwargs)
            call[arg] = bad
            try:
                fn(**call)
            except (TypeError, ValueError) as e:
                names = aliases.get(arg, (arg,))
                msg = str(e)
                if not any(n in msg for n in names):
                    problems.append(f"{arg}={label}: {type(e).__name__} not naming {names}: {msg}")
            except Exception as e:  # noqa: BLE001: the point of the sweep
                problems.append(f"{arg}={label}: {type(e).__name__}: {e}")
    assert not problems, "\n".join(problems)


def test_config_fields_of_the_wrong_type_or_range_name_the_field():
    for key in CFG:
        for label, bad in HOSTILE.items():
            cfg = dict(CFG)
            cfg[key] = bad
            try:
                rm.TransformerLM(cfg, batch=1, seq=4)
            except (TypeError, ValueError) as e:
                assert key in str(e), f"{key}={label}: {e}"
            except Exception as e:  # noqa: BLE001
                pytest.fail(f"{key}={label}: {type(e).__name__}: {e}")
    with pytest.raises(TypeError, match="config"):
        rm.TransformerLM([1, 2])
    with pytest.raises(ValueError, match="config: missing 'd_ff'"):
        rm.TransformerLM({k: v for k, v in CFG.items() if k != "d_ff"})


def test_paths_of_invalid_utf8_are_value_errors(tmp_path):
    m = model()
    for fn in (m.save, m.load, rb.write, rb.memory.dump_snapshot, rr.load_chip):
        with pytest.raises(ValueError, match="path"):
            fn(b"\xff\xfe.json")
        with pytest.raises(ValueError, match="path"):
            fn("\udcff.json")


# Case 6: ids of 2**32 and above are checked before they narrow to int32.
@pytest.mark.parametrize("big", [2**32 + 1, 2**32, 2**63 - 1, 23])
def test_token_ids_past_the_vocabulary_are_refused_before_narrowing(big):
    m = model()
    ids = np.array([[0, 1, big, 2]], np.int64)
    for call in (lambda: m(ids), lambda: m.forward(ids), lambda: m.forward(np.zeros((1, 4), np.int64), ids),
                 lambda: m.step(ids, ids)):
        with pytest.raises(ValueError, match=rf"token {big} at position 2 is outside 0\.\.22"):
            call()
    ids_u = np.array([[0, 1, 2, 2**64 - 1]], np.uint64)
    with pytest.raises(ValueError, match="inputs: token 18446744073709551615 at position 3"):
        m(ids_u)
    # The wrapped value's own logits are not what comes back: nothing comes back.
    assert m(np.array([[0, 1, 1, 2]], np.int64)).shape == (1, 4, 23)


def test_sizes_past_int64_and_unsigned_ranges_are_value_errors():
    with pytest.raises(ValueError, match="b: 9223372036854775808 is out of range"):
        rr.matmul(2**63, 8, 8)
    with pytest.raises(ValueError, match="n: 4294967297 is out of range"):
        ridge.set_num_threads(2**32 + 1)
    with pytest.raises(ValueError, match="colour: 4294967297 is out of range"):
        rb.start_range("r", 2**32 + 1)
    with pytest.raises(ValueError, match="seed"):
        rm.TransformerLM(CFG, seed=-1)
    with pytest.raises(ValueError, match="expected_m"):
        rg.m_grouped_fp8_gemm_nt_masked((fp8(1, 4, 128), f32(1, 4, 1)), (fp8(1, 8, 128), f32(1, 1, 1)), bf16(1, 4, 8),
                                        i32(4), 2**63)


# Case 8: the reproduction, and a dtype of every kind the sweep uses.
def test_flash_attn_func_with_float16_is_a_type_error_naming_q():
    q = np.ones((1, 4, 2, 16), np.float16)
    with pytest.raises(TypeError, match="q: expected a float32 or bfloat16 array, got float16"):
        ra.flash_attn_func(q, q, q)
    with pytest.raises(TypeError, match="k: expected a float32 or bfloat16 array, got int8"):
        ra.flash_attn_func(f32(1, 4, 2, 16), np.ones((1, 4, 2, 16), np.int8), f32(1, 4, 2, 16))


def test_a_softmax_scale_float32_cannot_hold_is_refused_not_narrowed():
    q = f32(1, 4, 2, 16)
    for s in (1e39, 1e-300):
        with pytest.raises(ValueError, match="softmax_scale: .* is outside float32's normal range"):
            ra.flash_attn_func(q, q, q, softmax_scale=s)


def test_ceil_div_by_zero_is_a_value_error():
    with pytest.raises(ValueError, match="y: 0 is out of range"):
        rg.ceil_div(5, 0)


# Case 4 in Python: a damaged checkpoint changes nothing.
def _edit_state(src, dst, **changes):
    raw = open(src, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    state = json.loads(header["__metadata__"]["state"])
    state.update(changes)
    header["__metadata__"]["state"] = json.dumps(state)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(dst, "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])


@pytest.mark.parametrize("changes, message", [
    ({"step": -1}, "state 'step' is -1"),
    ({"precision": "bogus"}, "state 'precision' is \"bogus\""),
    ({"skipped_steps": "a"}, "state 'skipped_steps' is \"a\""),
    ({"loss_scale": 0}, "state 'loss_scale' is 0"),
])
def test_load_of_a_damaged_checkpoint_changes_nothing(tmp_path, changes, message):
    src = rm.TransformerLM(CFG, batch=1, seq=4, seed=1)
    src.step(np.zeros((1, 4), np.int32), np.ones((1, 4), np.int32))
    good, bad = str(tmp_path / "good.safetensors"), str(tmp_path / "bad.safetensors")
    src.save(good)
    _edit_state(good, bad, **changes)
    before = open(bad, "rb").read()
    m = rm.TransformerLM(CFG, batch=1, seq=4, seed=2)
    weights = {k: v.copy() for k, v in m.state_dict().items()}
    with pytest.raises(ValueError) as e:
        m.load(bad)
    assert str(e.value) == f"checkpoint '{bad}': {message}; " + str(e.value).split("; ", 1)[1]
    assert all(np.array_equal(weights[k], v) for k, v in m.state_dict().items())
    assert open(bad, "rb").read() == before
    m.load(good)  # the unedited file loads
    assert all(np.array_equal(src.param(k), m.param(k)) for k in m.names())


def test_load_state_dict_is_all_or_nothing():
    m = model()
    keep = {k: v.copy() for k, v in m.state_dict().items()}
    sd = {k: np.full(v.shape, 3.0, np.float32) for k, v in keep.items()}
    sd["lm_head.weight"] = np.ones((2, 2), np.float32)  # the last one is wrong
    with pytest.raises(ValueError, match=r"state_dict\['lm_head.weight'\]: has the shape \(2, 2\)"):
        m.load_state_dict(sd)
    assert all(np.array_equal(keep[k], v) for k, v in m.state_dict().items())


def test_operand_helpers_name_the_argument():
    with pytest.raises(TypeError, match="lhs: expected a NumPy array or a torch tensor, got int"):
        _arrays.arg(3, "lhs")
    with pytest.raises(TypeError, match="lhs: unsupported dtype object"):
        _arrays.arg(np.array([None]), "lhs")


def test_a_message_quoting_bytes_that_are_not_utf8_is_still_a_value_error(tmp_path):
    bad = tmp_path / "chip.json"
    bad.write_bytes(b'{"id": "\xff\xfe"}')
    with pytest.raises(ValueError, match=r"chip file .*\\xff"):
        rr.load_chip(str(bad))


# Issue 37: a library's name for an argument reached Python as it was (train_bpe's missing file was
# "texts: ...", Tokenizer.save to a file "dir: ..."); a max_tokens near 2**63 wrapped past the context
# check to fail as "cache_tokens: -9223372036854775792 ..."; num_splits past the kernel's 256 passed and
# failed inside flash_attn_with_kvcache after the prefill.
def test_library_errors_name_the_python_argument(tmp_path):
    import ridge.data as rd

    with pytest.raises(ValueError, match=r"^input_path: .*nonexistent\.txt"):
        rd.train_bpe(str(tmp_path / "nonexistent.txt"), 300, [])
    with pytest.raises(ValueError, match=r"^input_path: "):
        rd.train_bpe([str(tmp_path / "nonexistent.txt")], 300, [])
    f = tmp_path / "a_file"
    f.write_text("x")
    tok = rd.Tokenizer({i: bytes([i]) for i in range(256)}, [])
    with pytest.raises(ValueError, match=r"^directory: "):
        tok.save(f)
    assert f.read_text() == "x"


@pytest.mark.parametrize("max_tokens", [2**63 - 1, 2**63 - 3, 2**62])
def test_max_tokens_that_would_wrap_is_refused_naming_it(max_tokens):
    m = model()
    with pytest.raises(ValueError, match=r"^max_tokens: "):
        m.generate([[1, 2]], max_tokens=max_tokens)


def test_num_splits_past_the_kernels_limit_is_refused_up_front():
    im = model().inference()
    with pytest.raises(ValueError, match=r"^num_splits: 257 is out of range"):
        im.generate([[1, 2]], max_tokens=2, num_splits=257)
    with pytest.raises(ValueError, match=r"^n: 257 is out of range"):
        im.session(max_sequences=1).set_num_splits(257)
    assert len(im.generate([[1, 2]], max_tokens=2, num_splits=256)[0]) == 2
