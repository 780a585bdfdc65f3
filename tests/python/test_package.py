"""The package as a user first meets it: `import ridge` then ridge.gemm (the submodules load on first
use), and `import ridge` with one GEMM on a CPU without AVX-512, under QEMU's Haswell model (AVX2 and
FMA; any AVX-512 instruction faults there, as it would on such a machine)."""
import os
import shutil
import subprocess
import sys

import pytest

import ridge

SUBMODULES = ["attention", "bench", "data", "gemm", "model", "roofline"]


def test_submodules_load_on_attribute_access():
    code = ("import sys, ridge; assert 'ridge.gemm' not in sys.modules; g = ridge.gemm; "
            "assert g is sys.modules['ridge.gemm'] and callable(g.bf16_gemm_nt); print(sorted(dir(ridge)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for name in SUBMODULES:
        assert f"'{name}'" in out
    with pytest.raises(AttributeError, match="module 'ridge' has no attribute 'gemmm'"):
        ridge.gemmm
    assert set(SUBMODULES) <= set(dir(ridge))


# The AVX2 model with the features QEMU's TCG lacks switched off (tests/tiers/run_tier.py).
HASWELL = "Haswell-v4,-pcid,-x2apic,-tsc-deadline,-invpcid,-spec-ctrl"


def test_import_and_one_gemm_on_a_cpu_without_avx512():
    qemu = shutil.which("qemu-x86_64")
    assert qemu, "qemu-x86_64 not found: scripts/setup installs qemu-user"
    code = """
import numpy as np, ml_dtypes, ridge
assert ridge.get_isa() == 'avx2', ridge.get_isa()
assert ridge.supported_isas() == ['scalar', 'avx2'], ridge.supported_isas()
rng = np.random.default_rng(0)
a = rng.standard_normal((37, 96)).astype(ml_dtypes.bfloat16)
b = rng.standard_normal((50, 96)).astype(ml_dtypes.bfloat16)
d = np.empty((37, 50), dtype=np.float32)
ridge.gemm.bf16_gemm_nt(a, b, d)
want = a.astype(np.float64) @ b.astype(np.float64).T
err = np.abs(d - want).max() / np.abs(want).max()
assert err < 1e-5, err
print('ok', ridge.get_isa(), err)
"""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "RIDGE_ISA")}
    p = subprocess.run([qemu, "-cpu", HASWELL, sys.executable, "-c", code], capture_output=True, text=True,
                       env=env, timeout=600)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert p.stdout.startswith("ok avx2")
