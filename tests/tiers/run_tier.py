#!/usr/bin/env python3
"""One CPU tier's check: ridge run under QEMU's model of a CPU without AVX-512 (or without AVX).

Under `qemu-x86_64 -cpu MODEL`, cpuid reports that model and any instruction beyond it faults (SIGILL),
whatever the host has. So a host with AVX-512 or AMX still exercises the scalar and AVX2 tiers, and
code of a higher tier that runs where it must not (a dynamic initialiser built with AVX-512 flags, a
dispatch that forgets to ask) fails here. Each check runs the real binaries; where a result can be held
against a reference, it is: the benchmarks' rows against their peers computed in the same run (OpenBLAS,
oneDNN, the math path), and the token file and the training losses against the same commands run natively
with RIDGE_ISA naming the tier (so the same kernels, on the host's silicon).

usage: run_tier.py --qemu QEMU --tier scalar|avx2 --ridge RIDGE --data DIR CHECK
       run_tier.py --qemu QEMU --tier avx2 --program TEST_BINARY [ARGS...]    (a test binary under the model)
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

# The CPU models: Nehalem is x86-64-v2 without AVX (the scalar path); Haswell-v4 has AVX2, FMA, F16C and
# BMI2 (the avx2 path). The Haswell features QEMU's TCG does not emulate are switched off so that QEMU
# prints no warning for each (they are system features no user program reads).
MODELS = {
    "scalar": "Nehalem",
    "avx2": "Haswell-v4,-pcid,-x2apic,-tsc-deadline,-invpcid,-spec-ctrl",
}
CHECKS = ["version", "info", "bench_gemm", "bench_attention", "train_generate", "data_encode"]

TEXT = (
    "The roofline model bounds the time of a kernel by its arithmetic and by its memory traffic. "
    "A step that takes fifty milliseconds where five would do is either waiting on memory or doing "
    "work it need not do, and the bound says which. "
) * 8


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


class Runner:
    def __init__(self, qemu, tier, timeout=900):
        self.qemu, self.tier, self.timeout = qemu, tier, timeout
        self.env = dict(os.environ)
        # A host's OpenBLAS core type would pick its kernels for the host, not for the model's CPU.
        self.env.pop("OPENBLAS_CORETYPE", None)
        self.env.pop("OPENBLAS_L2_SIZE", None)
        self.env.pop("RIDGE_ISA", None)
        self.env.setdefault("OMP_NUM_THREADS", "2")

    def run(self, argv, emulated=True, cwd=None, native_isa=None):
        env = dict(self.env)
        cmd = list(argv)
        if emulated:
            cmd = [self.qemu, "-cpu", MODELS[self.tier]] + cmd
        if native_isa:
            env["RIDGE_ISA"] = native_isa
        where = "under " + MODELS[self.tier].split(",")[0] if emulated else f"natively (RIDGE_ISA={native_isa})"
        print("$", " ".join(cmd), f"  # {where}", flush=True)
        p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=self.timeout)
        if p.returncode != 0:
            sig = f" (signal {-p.returncode})" if p.returncode < 0 else ""
            fail(f"exit {p.returncode}{sig} from {' '.join(argv)} {where}\nstdout: {p.stdout[-3000:]}\n"
                 f"stderr: {p.stderr[-3000:]}")
        return p.stdout


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def check_version(r, a):
    out = r.run([a.ridge, "--version"])
    if not out.startswith("ridge "):
        fail(f"ridge --version printed {out!r}")


def check_info(r, a):
    out = r.run([a.ridge, "info"])
    want = f"active     {a.tier} (best {a.tier};"
    if want not in out:
        fail(f"ridge info under the {a.tier} model does not say '{want}':\n{out}")
    print(next(line for line in out.splitlines() if line.startswith("isa paths")))


def check_bench_gemm(r, a):
    with tempfile.TemporaryDirectory() as tmp:
        shapes = os.path.join(tmp, "shapes.json")
        with open(shapes, "w") as f:
            json.dump({"dense": [{"m": 37, "n": 80, "k": 384}]}, f)
        out = r.run([a.ridge, "bench", "gemm", "--shapes", shapes, "--set", "set=dense", "--check", "--json", "--no-progress",
                     "--warmup", "0", "--iters", "1", "--min-time", "0", "--max-time", "0.01"])
    rows = {row["dtype"]: row for row in json_lines(out)}
    rows["fp8"] = rows.get("fp8_e4m3")
    # Each row against ridge's scalar reference twin on the same operands (--check), the largest
    # difference over the largest magnitude: fp32 differs by summation order only (k = 384 terms:
    # ~1e-6); bf16 and fp8 rows write bf16, so by at most one bf16 rounding (2^-9 of an element).
    bounds = {"fp32": 1e-5, "bf16": 8e-3, "fp8": 8e-3}
    for dtype, bound in bounds.items():
        row = rows.get(dtype)
        if not row:
            fail(f"bench gemm printed no {dtype} row: {out}")
        kernel = row.get("kernel", "")
        if a.tier not in kernel:
            fail(f"{dtype} row ran kernel '{kernel}', not the {a.tier} path's")
        got = row.get("max_rel_diff_vs_reference")
        if got is None or not got <= bound:
            fail(f"{dtype} row: max_rel_diff_vs_reference = {got}, bound {bound}: {row}")
        print(f"{dtype}: kernel {kernel}, max_rel_diff_vs_reference {got:.3g} (bound {bound})")


def check_bench_attention(r, a):
    out = r.run([a.ridge, "bench", "attention", "--set", "batch=1", "--set", "heads=2", "--set", "seq=67",
                 "--set", "head_dim=64", "--set", "causal=true", "--set", "dtype=fp32,bf16", "--set",
                 "pass=forward+backward", "--no-torch", "--json", "--no-progress", "--warmup", "0", "--iters", "1",
                 "--min-time", "0", "--max-time", "0.01"])
    rows = json_lines(out)
    if len(rows) != 2:
        fail(f"bench attention printed {len(rows)} rows, expected 2: {out}")
    # Against the math path in fp32: fp32 to rounding; bf16 inputs are the same values (the math path
    # reads them widened), the output rounded to bf16 once.
    for row in rows:
        bound = 1e-5 if row["dtype"] == "fp32" else 1e-2
        for key in ("max_rel_diff_vs_math", "max_rel_diff_vs_math_dq"):
            got = row.get(key)
            if got is None or not got <= bound:
                fail(f"{row['dtype']} attention row: {key} = {got}, bound {bound}: {row}")
            print(f"{row['dtype']}: {key} {got:.3g} (bound {bound})")


def losses(out):
    return [s["loss"] for s in json_lines(out) if "loss" in s]


def check_train_generate(r, a):
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "text.txt")
        with open(text, "w") as f:
            f.write(TEXT)
        train = ["train", "--text", text, "--vocab", "256", "--size", "tiny", "--context", "32", "--batch", "2",
                 "--steps", "2", "--log-every", "1", "--json", "--seed", "1"]
        emulated = losses(r.run([a.ridge] + train + ["--checkpoint", os.path.join(tmp, "tiny.safetensors")]))
        native = losses(r.run([a.ridge] + train, emulated=False, native_isa=a.tier))
        if len(emulated) != 2 or len(native) != 2:
            fail(f"expected 2 logged losses each, got {emulated} emulated and {native} native")
        for e, n in zip(emulated, native):
            if not (math.isfinite(e) and abs(e - n) <= 1e-4 * abs(n)):
                fail(f"losses under the model {emulated} differ from the native {a.tier} path's {native}")
        print(f"losses {emulated} (native {a.tier}: {native})")
        out = r.run([a.ridge, "generate", "--checkpoint", os.path.join(tmp, "tiny.safetensors"), "--prompt", "The ",
                     "--max-tokens", "5", "--temperature", "0", "--json"])
        doc = json.loads(out)
        print(f"generated: {json.dumps(doc)[:300]}")
        tokens = doc.get("tokens", doc.get("sequences", [{}])[0].get("tokens") if doc.get("sequences") else None)
        if tokens is None:
            fail(f"ridge generate --json has no tokens: {out}")


def check_data_encode(r, a):
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "text.txt")
        with open(text, "w") as f:
            f.write(TEXT)
        tok = ["--tokenizer", os.path.join(a.data, "gpt2_vocab.json"), "--merges",
               os.path.join(a.data, "gpt2_merges.txt")]
        em, nat = os.path.join(tmp, "emulated.bin"), os.path.join(tmp, "native.bin")
        r.run([a.ridge, "data", "encode", text, "-o", em] + tok)
        r.run([a.ridge, "data", "encode", text, "-o", nat] + tok, emulated=False, native_isa=a.tier)
        with open(em, "rb") as f1, open(nat, "rb") as f2:
            e, n = f1.read(), f2.read()
        if not e or e != n:
            fail(f"the token file under the model ({len(e)} bytes) differs from the native one ({len(n)} bytes)")
        print(f"{len(e) // 2} tokens, identical to the native encode")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qemu", required=True)
    ap.add_argument("--tier", required=True, choices=sorted(MODELS))
    ap.add_argument("--ridge")
    ap.add_argument("--data")
    ap.add_argument("--program", nargs=argparse.REMAINDER)
    ap.add_argument("check", nargs="?", choices=CHECKS)
    a = ap.parse_args()
    r = Runner(a.qemu, a.tier)
    if a.program:
        out = r.run(a.program)
        print(out[-4000:])
    elif a.check:
        globals()["check_" + a.check](r, a)
    else:
        ap.error("name a CHECK or --program")
    print("PASS")


if __name__ == "__main__":
    main()
