#!/usr/bin/env python3
"""llama.cpp (through llama-cpp-python's low-level C API) as a peer for `ridge bench decode`.

    tools/llama_decode_peer.py --gguf F --threads T --prompt-len P --batch B --context C --tokens N
        [--phase prefill|decode|both] [--kv-type f16|bf16|f32] [--flash-attn auto|on|off]
        [--warmup W] [--iters I] [--seed S] [--json]

F is written by tools/ridge_to_gguf.py from the same weights ridge runs (bf16 or q8_0 for the bench).
Prefill: one prompt of P random ids in one llama_decode call (n_batch >= P; llama.cpp's default
physical batch of 512), logits of the last position only, greedy; tokens/s = P / time.
Decode: B sequences (seq ids 0..B-1, llama.cpp's default non-unified cache: one KV stream per
sequence), each with C tokens in its cache (one real prefill of C random ids into sequence 0, its
state copied into the others with llama_state_seq_get/set_data, so every sequence has its own
cells: the bytes a step reads are those of B distinct prompts), then N steps of one llama_decode
call holding one token per sequence at position C + step, the next token the argmax of each
sequence's logits; tokens/s = B * N / time. Between timed runs the decoded cells are removed
(llama_memory_seq_rm from position C), so each run starts from the same cache.
The KV cache is llama.cpp's default f16 unless --kv-type says otherwise; flash attention as
llama.cpp decides (auto) unless --flash-attn says otherwise. Threads: n_threads = n_threads_batch = T.

An MoE GGUF (tools/ridge_to_gguf.py writes ridge's MoE checkpoints in Mixtral's form) runs the same way.
Before anything is timed it gets one llama_decode in llama.cpp's warm-up mode (llama_set_warmup: every
expert of every layer computes, as llama.cpp's own tools warm up), then an empty cache: a batch-1
decode reads top_k of E experts per layer, so the --warmup runs alone could leave experts whose
weights are first touched inside a timed run. Its rows add "experts" and "experts_used" (the file's
expert_count and expert_used_count); a dense file's rows are as they were.

Each measurement is timed --iters times after --warmup untimed runs; with --json one line each:
  {"peer": "llama.cpp", "version": "llama-cpp-python 0.3.x", "phase": "prefill", "type": "BF16",
   "model": "<llama.cpp's description>", "threads": 2, "batch": 1, "prompt_len": 512,
   "kv_type": "f16", "flash_attn": "auto", "tokens_per_s": median, "min_tokens_per_s": ...,
   "max_tokens_per_s": ..., "median_s": ..., "iters": 5}
  {..., "phase": "decode", "batch": 4, "context": 1024, "tokens": 32, ...}
Without --json a line of text each. Exit codes: 0; 1 llama.cpp failed (one line, {"error": ...}
with --json); 2 bad input (one line); 3 llama-cpp-python not installed (one line, {"error": ...}
with --json).
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ridge_checkpoint as rc  # noqa: E402

KV_TYPES = {"f32": 0, "f16": 1, "bf16": 30}  # ggml_type
FLASH = {"auto": -1, "off": 0, "on": 1}  # llama_flash_attn_type


def build_isa(llama_cpp):
    """The widest x86 vector ISA this llama.cpp build uses, from its own system info ("AVX512 = 1 | ...")."""
    try:
        info = llama_cpp.llama_print_system_info().decode()
    except Exception:
        return "isa unknown"
    for name in ("AMX_INT8", "AVX512", "AVX2", "AVX"):
        if f"{name} = 1" in info:
            return name.lower().replace("_int8", "") + " build"
    return "no x86 vector ISA"


class LlamaError(RuntimeError):
    pass


class TooLarge(LlamaError):
    pass


def _available_memory():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class Session:
    """One llama.cpp model and context, driven token id by token id."""

    def __init__(self, path, threads, n_ctx, n_batch, n_seq=1, kv_type="f16", flash="auto", verbose=False):
        import llama_cpp as L
        import numpy as np

        self.L, self.np = L, np
        if not verbose:  # llama.cpp logs every load to stderr; keep errors only
            self._log = L.llama_log_callback(lambda level, text, _: (
                sys.stderr.write(text.decode(errors="replace")) if level == 4 else None))  # GGML_LOG_LEVEL_ERROR
            L.llama_log_set(self._log, ctypes.c_void_p())
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise LlamaError(f"llama.cpp could not load '{path}'")
        n_layer, n_embd = L.llama_model_n_layer(self.model), L.llama_model_n_embd(self.model)
        n_head, n_head_kv = L.llama_model_n_head(self.model), L.llama_model_n_head_kv(self.model)
        kv_bytes = 2 * n_layer * n_ctx * n_head_kv * (n_embd // n_head) * {"f32": 4, "f16": 2, "bf16": 2}[kv_type]
        have = _available_memory()
        if have is not None and kv_bytes > 0.9 * have:
            L.llama_model_free(self.model)
            raise TooLarge(f"the {kv_type} KV cache of {n_ctx} cells ({n_seq} sequences) needs {kv_bytes / 2**30:.2f} GiB; "
                           f"{have / 2**30:.2f} GiB is available")
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, n_batch, min(n_batch, 512)
        cp.n_seq_max = n_seq
        cp.n_threads = cp.n_threads_batch = threads
        cp.type_k = cp.type_v = KV_TYPES[kv_type]
        cp.flash_attn_type = FLASH[flash]
        cp.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            L.llama_model_free(self.model)
            raise LlamaError(f"llama.cpp could not create a context (n_ctx {n_ctx}, n_seq {n_seq}, "
                             f"kv {kv_type}, flash attention {flash})")
        self.mem = L.llama_get_memory(self.ctx)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.n_batch = n_batch
        self.batch = L.llama_batch_init(n_batch, 0, 1)
        b = self.batch
        self.tok = np.ctypeslib.as_array(b.token, shape=(n_batch,))
        self.pos = np.ctypeslib.as_array(b.pos, shape=(n_batch,))
        self.nseq = np.ctypeslib.as_array(b.n_seq_id, shape=(n_batch,))
        self.out = np.ctypeslib.as_array(b.logits, shape=(n_batch,))
        self.nseq[:] = 1
        self._seq = [None] * n_batch
        buf = ctypes.create_string_buffer(256)
        L.llama_model_desc(self.model, buf, 256)
        self.desc = buf.value.decode(errors="replace")
        arch = self._meta("general.architecture")
        self.experts = int(self._meta(f"{arch}.expert_count") or 0)
        self.experts_used = int(self._meta(f"{arch}.expert_used_count") or 0)

    def _meta(self, key):
        """The model's metadata value of `key` as a string, or None where the file has none."""
        buf = ctypes.create_string_buffer(256)
        n = self.L.llama_model_meta_val_str(self.model, key.encode(), buf, 256)
        return buf.value.decode(errors="replace") if n >= 0 else None

    def warm_experts(self):
        """For an MoE model: one token through llama.cpp's warm-up mode, in which every expert computes (so
        every expert's weights are resident before timing), then an empty cache. Nothing for a dense one."""
        if not self.experts:
            return
        self.L.llama_set_warmup(self.ctx, True)
        try:
            np = self.np
            self.decode(np.zeros(1, np.int32), np.zeros(1, np.int32), [0], np.ones(1, np.int8))
        finally:
            self.L.llama_set_warmup(self.ctx, False)
        self.clear()

    def moe_fields(self):
        """What an MoE model's result rows add ({} for a dense model: its rows stay as they were)."""
        return {"experts": self.experts, "experts_used": self.experts_used} if self.experts else {}

    def close(self):
        L = self.L
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)

    def decode(self, tokens, pos, seqs, outputs):
        """One llama_decode of len(tokens) <= n_batch tokens; returns the logits of the tokens flagged in
        `outputs`, [n_out, vocab] (a copy)."""
        n = len(tokens)
        self.tok[:n], self.pos[:n], self.out[:n] = tokens, pos, outputs
        for i in range(n):
            if self._seq[i] != seqs[i]:
                self.batch.seq_id[i][0] = int(seqs[i])
                self._seq[i] = int(seqs[i])
        self.batch.n_tokens = n
        rc = self.L.llama_decode(self.ctx, self.batch)
        if rc != 0:
            raise LlamaError(f"llama_decode returned {rc} ({n} tokens)")
        n_out = int(self.np.count_nonzero(self.out[:n]))
        if n_out == 0:
            return None
        p = self.L.llama_get_logits(self.ctx)
        return self.np.ctypeslib.as_array(p, shape=(n_out, self.n_vocab)).copy()

    def prefill(self, ids, seq=0, pos0=0, all_logits=False):
        """ids (1-D) into sequence `seq` from pos0 on, in chunks of n_batch; logits of every position
        ([n, vocab]) or of the last ([1, vocab])."""
        np = self.np
        out = []
        for a in range(0, len(ids), self.n_batch):
            chunk = ids[a:a + self.n_batch]
            flags = np.zeros(len(chunk), np.int8)
            if all_logits:
                flags[:] = 1
            elif a + len(chunk) == len(ids):
                flags[-1] = 1
            lg = self.decode(chunk, np.arange(pos0 + a, pos0 + a + len(chunk)), [seq] * len(chunk), flags)
            if lg is not None:
                out.append(lg)
        return np.concatenate(out)

    def clear(self):
        self.L.llama_memory_clear(self.mem, True)

    def copy_seq(self, src, dsts):
        """The cache cells of sequence src copied into each of dsts (their own cells)."""
        L = self.L
        size = L.llama_state_seq_get_size(self.ctx, src)
        buf = (ctypes.c_uint8 * size)()
        if L.llama_state_seq_get_data(self.ctx, buf, size, src) != size:
            raise LlamaError(f"llama_state_seq_get_data of sequence {src} failed")
        for d in dsts:
            if L.llama_state_seq_set_data(self.ctx, buf, size, d) != size:
                raise LlamaError(f"llama_state_seq_set_data into sequence {d} failed (cache full?)")

    def truncate(self, pos):
        """Removes every sequence's cells at positions >= pos."""
        if not self.L.llama_memory_seq_rm(self.mem, -1, pos, -1):
            raise LlamaError(f"llama_memory_seq_rm from position {pos} failed")


def file_type(path):
    """The GGUF's general.file_type as llama.cpp names it (reads the header with gguf-py if present)."""
    try:
        import gguf

        r = gguf.GGUFReader(path)
        f = r.fields.get("general.file_type")
        return gguf.LlamaFileType(int(f.parts[f.data[0]][0])).name.replace("MOSTLY_", "").replace("ALL_", "")
    except Exception:
        return "?"


def timed(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return ts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=128, help="tokens in each sequence's cache before decoding")
    ap.add_argument("--tokens", type=int, default=32, help="decode steps (one token per sequence each)")
    ap.add_argument("--phase", choices=["prefill", "decode", "both"], default="both")
    ap.add_argument("--kv-type", choices=list(KV_TYPES), default="f16")
    ap.add_argument("--flash-attn", choices=list(FLASH), default="auto")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="llama.cpp's own log on stderr")
    ap.add_argument("--cases", type=rc.parse_cases, help="JSON list of {phase, batch, context, prompt}: measure each in "
                    "turn, print {\"results\": [...]} (what `ridge bench decode` runs)")
    a = ap.parse_args()
    for k in ("threads", "prompt_len", "batch", "context", "tokens", "iters"):
        if getattr(a, k) < 1:
            ap.error(f"--{k.replace('_', '-')} must be >= 1, got {getattr(a, k)}")
    if a.warmup < 0:
        ap.error(f"--warmup must be >= 0, got {a.warmup}")

    def fail(msg, code):
        print(json.dumps({"error": msg}) if a.json else "llama_decode_peer: " + msg, flush=True)
        return code

    try:
        import llama_cpp
        import numpy as np
    except Exception as e:
        return fail(f"llama-cpp-python not installed ({type(e).__name__}); scripts/setup-peers llama installs it", 3)
    if not os.path.isfile(a.gguf):
        print(f"llama_decode_peer: --gguf {a.gguf}: no such file", file=sys.stderr)
        return 2
    version = "llama-cpp-python " + llama_cpp.__version__ + " (" + build_isa(llama_cpp) + ")"
    ftype = file_type(a.gguf)
    gen = np.random.default_rng(a.seed)
    base = {"peer": "llama.cpp", "version": version, "type": ftype, "threads": a.threads, "kv_type": a.kv_type,
            "flash_attn": a.flash_attn}
    if a.cases is not None:
        # Several cases in one process (`ridge bench decode`): each measured in turn, one result each, in
        # order, on the last line: {"results": [{"tokens_per_s": ...} | {"error": ...}, ...]}.
        results = []
        for c in a.cases:
            a.phase, a.batch = c["phase"], c.get("batch", 1)
            a.prompt_len, a.context = c.get("prompt", 1) or 1, c.get("context", 1) or 1
            try:
                r = measure(a, gen, base, np)
                results.append(r[0])
            except LlamaError as e:
                results.append({"error": str(e)})
        print(json.dumps({"results": results}), flush=True)
        return 0
    try:
        out = measure(a, gen, base, np)
    except TooLarge as e:
        return fail(str(e), 2)
    except LlamaError as e:
        return fail(str(e), 1)
    for r in out:
        if a.json:
            print(json.dumps(r), flush=True)
        else:
            what = (f"prompt {r['prompt_len']}" if r["phase"] == "prefill"
                    else f"batch {r['batch']}, context {r['context']}, {r['tokens']} tokens")
            if "experts" in r:
                what = f"MoE {r['experts']} experts top-{r['experts_used']}, " + what
            print(f"llama.cpp ({version}) {r['phase']} ({r['type']}, {what}, {a.threads} threads, kv {a.kv_type}): "
                  f"{r['tokens_per_s']:.1f} tokens/s (median of {r['iters']}; {r['min_tokens_per_s']:.1f} .. "
                  f"{r['max_tokens_per_s']:.1f})")
    return 0


def measure(a, gen, base, np):
    """The measurements a.phase asks for (one dict each); LlamaError on failure."""
    out = []
    if a.phase in ("prefill", "both"):
        n_ctx = -(-a.prompt_len // 256) * 256
        s = Session(a.gguf, a.threads, n_ctx, max(a.prompt_len, 1), 1, a.kv_type, a.flash_attn, a.verbose)
        s.warm_experts()
        prompt = gen.integers(0, s.n_vocab, size=a.prompt_len, dtype=np.int32)

        def prefill():
            s.clear()
            s.prefill(prompt).argmax(-1)

        ts = timed(prefill, a.warmup, a.iters)
        out.append(dict(base, phase="prefill", model=s.desc, **s.moe_fields(), batch=1, prompt_len=a.prompt_len,
                        **stats([a.prompt_len / t for t in ts], ts)))
        s.close()
    if a.phase in ("decode", "both"):
        per_seq = -(-(a.context + a.tokens) // 256) * 256
        s = Session(a.gguf, a.threads, per_seq * a.batch, max(a.batch, min(a.context, 2048)), a.batch,
                    a.kv_type, a.flash_attn, a.verbose)
        s.warm_experts()
        first = int(s.prefill(gen.integers(0, s.n_vocab, size=a.context, dtype=np.int32)).argmax())
        s.copy_seq(0, range(1, a.batch))
        seqs = np.arange(a.batch, dtype=np.int32)
        ones = np.ones(a.batch, np.int8)

        def decode():
            s.truncate(a.context)
            tok = np.full(a.batch, first, np.int32)
            for step in range(a.tokens):
                pos = np.full(a.batch, a.context + step, np.int32)
                tok = s.decode(tok, pos, seqs, ones).argmax(-1).astype(np.int32)

        ts = timed(decode, a.warmup, a.iters)
        out.append(dict(base, phase="decode", model=s.desc, **s.moe_fields(), batch=a.batch, context=a.context,
                        tokens=a.tokens, **stats([a.batch * a.tokens / t for t in ts], ts)))
        s.close()
    return out


def stats(rates, ts):
    return {"tokens_per_s": statistics.median(rates), "min_tokens_per_s": min(rates), "max_tokens_per_s": max(rates),
            "median_s": statistics.median(ts), "iters": len(ts)}


if __name__ == "__main__":
    sys.exit(main())
