"""What calling ridge from Python costs on top of the kernel: ridge.gemm.fp32_gemm_nt (NumPy and, when
present, torch) against the same kernel timed in a C++ loop over the same arrays, on small shapes.

    .venv/bin/python tools/python_call_overhead.py
"""
import time

import numpy as np

import ridge
import ridge.gemm as rg
from ridge import _ridge


def per_call(fn, iters):
    fn()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def main():
    ridge.set_num_threads(1)
    print(f"isa {ridge.get_isa()}, 1 thread; microseconds per call (best of 5)")
    print(f"{'m=n=k':>6} {'C++ loop':>10} {'Python+NumPy':>13} {'overhead':>9} {'raw binding':>12}", end="")
    try:
        import torch
    except ImportError:
        torch = None
    print(f" {'Python+torch':>13}" if torch else "")
    for s in (1, 8, 16, 32, 64):
        a = np.random.rand(s, s).astype(np.float32)
        b = np.random.rand(s, s).astype(np.float32)
        d = np.empty((s, s), np.float32)
        iters = 20000 if s <= 32 else 5000
        cpp = min(_ridge.gemm._time_fp32_nt(a, b, d, iters) for _ in range(5))
        py = min(per_call(lambda: rg.fp32_gemm_nt(a, b, d), iters) for _ in range(5))
        raw = min(per_call(lambda: _ridge.gemm.dense("nt", "float32", a, b, d, None), iters) for _ in range(5))
        line = f"{s:>6} {cpp * 1e6:>10.2f} {py * 1e6:>13.2f} {(py - cpp) * 1e6:>9.2f} {raw * 1e6:>12.2f}"
        if torch:
            ta, tb, td = (torch.from_numpy(x) for x in (a, b, d))
            tt = min(per_call(lambda: rg.fp32_gemm_nt(ta, tb, td), iters) for _ in range(5))
            line += f" {tt * 1e6:>13.2f}"
        print(line)


if __name__ == "__main__":
    main()
