#!/usr/bin/env bash
# A separate venv, .venv-bench, for benchmarks/embedding.py's TorchRec and fbgemm peers:
# torchrec 1.8.0 with fbgemm-gpu-cpu 1.8.0 load against torch 2.13.0 (1.9.x does not).
# The shared .venv is left alone.  torchrec and fbgemm go in with --no-deps (their declared
# deps pull other torch / fbgemm builds); the few they import are listed after them.
# fbrapids itself is installed editable, which must keep torch 2.13.0 (checked at the end).
# pip then says "torchrec 1.8.0 requires fbgemm-gpu, which is not installed": fbgemm-gpu-cpu
# provides the same fbgemm_gpu module.
# The same pins are the `bench` extra of pyproject.toml.
#
#   scripts/bench_venv.sh && .venv-bench/bin/python benchmarks/embedding.py --threads 1,2
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-bench}
python3 -m venv "$VENV"
"$VENV/bin/pip" install torch==2.13.0
"$VENV/bin/pip" install --no-deps torchrec==1.8.0 fbgemm-gpu-cpu==1.8.0
"$VENV/bin/pip" install tensordict torchmetrics==1.0.3 pyre-extensions typing-inspect mypy-extensions \
    lightning-utilities pyvers scikit-learn lightgbm
"$VENV/bin/pip" install -e .
"$VENV/bin/python" - <<'PY'
import torch, torchrec, fbgemm_gpu  # noqa: F401  (they load together)
from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection  # noqa: F401
assert torch.__version__.split("+")[0] == "2.13.0", f"torch {torch.__version__} replaced 2.13.0"
import sys
print(f"{sys.prefix}: torch {torch.__version__}, torchrec and fbgemm load")
PY
