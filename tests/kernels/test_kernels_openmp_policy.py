"""Host kernels load libgomp with a passive wait policy unless the user chose one (see
``fbrapids.kernels.compile_host.OMP_WAIT_POLICY`` for the measurements behind it)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_openmp_wait_policy_default_and_user_override(tmp_path):
    """A fresh process that loads a kernel gets OMP_WAIT_POLICY=PASSIVE unless it set one,
    and its libgomp reads it (OMP_DISPLAY_ENV=verbose prints what the runtime took: a
    passive policy means no spinning, GOMP_SPINCOUNT 0; libgomp's own default spins)."""
    code = ("from fbrapids.kernels.compile_host import load_source\n"
            "lib = load_source('FBX_KERNEL int fbx_t(int n) { int s = 0;\\n"
            "#pragma omp parallel for reduction(+:s)\\n for (int i = 0; i < n; ++i) s += i; return s; }')\n"
            "assert lib.fbx_t(100) == 4950\n")
    root = str(Path(__file__).resolve().parents[2])
    for env_value, want in ((None, "GOMP_SPINCOUNT = '0'"), ("ACTIVE", "OMP_WAIT_POLICY = 'ACTIVE'")):
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        env.update(PYTHONPATH=root, OMP_DISPLAY_ENV="VERBOSE")
        if env_value:
            env["OMP_WAIT_POLICY"] = env_value
        res = subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        assert want in res.stderr, res.stderr[-2000:]
