#!/usr/bin/env bash
# The offline install and the device check rehearsed here, without a GPU (docs/gpu.md): the set's
# parts copied one at a time into a scratch folder standing in for the GPU host's /tmp (each copy's
# bytes checked against GPU_CARRY_BYTES, default 64 MiB), joined and unpacked by the host's
# unpack.sh, then scripts/gpu_check.py's first pass and its rerun with every device step stood in
# for: by its CUDA modules looked up in the kernel cache (.gpu/kernels, make gpu-kernels; a miss
# counts the seconds NVRTC took for it here), else a stub.  The first pass also checks that the
# unpacked set holds every module its files import.  From the project root, after
# scripts/gpu_pack.sh (and make gpu-kernels):
#     scripts/gpu_rehearse.sh [.gpu]        -> one JSON line (also .gpu/rehearsal.json)
set -euo pipefail
dest=${1:-.gpu}
PY=${PY:-python3}
root=$(pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export GPU_WC="$scratch/wc" GPU_SITE="$scratch/site" GPU_NO_BUILD=1
# the stub of cudf's import check: the set unpacked whole, at the pinned version
export GPU_UNPACK_CHECK='test -f "$GPU_SITE/cudf/__init__.py" && ls -d "$GPU_SITE"/cudf_cu13-26.10.2.dist-info >/dev/null && echo "cudf 26.10.2 unpacked (import stubbed: no device)"'
limit=${GPU_CARRY_BYTES:-$((64 * 1024 * 1024))}
parts=$(ls -d "$dest"/c[0-9]* | sort)
n=$(echo "$parts" | wc -l)
kernels=()
[ -d "$dest/kernels" ] && kernels=(--kernel-cache "$dest/kernels")
secs() { printf "%.2f" "$(echo "$(date +%s.%N) - $1" | bc)"; }
calls=""
i=0
for p in $parts; do
  i=$((i + 1))
  with=("$p" "$dest/setup")
  [ "$i" -eq "$n" ] && [ -d "$dest/kernels" ] && with+=("$dest/kernels")  # the cache goes with the last part
  carried=$(du -sb "${with[@]}" | awk '{s += $1} END {print s}')
  [ "$carried" -le "$limit" ] || { echo "copy $i carries $carried bytes > $limit" >&2; exit 1; }
  t=$(date +%s.%N)
  mkdir -p "$GPU_WC" && cp "$p"/* "$GPU_WC"/
  if [ "$i" -eq "$n" ]; then  # the last part's copy unpacks and runs the check's first pass
    bash "$dest/setup/unpack.sh"
    "$PY" scripts/gpu_check.py --rehearse --out "$scratch/gc" --site "$GPU_SITE" --pack "$dest/pack.json" \
      "${kernels[@]}" --only gpu-fixes diff-cudf demo-gpu extract-10m embedding-cuda
    cp "$scratch/gc/gpu-check.json" "$scratch/first-pass.json"
  fi
  calls="$calls{\"copy\": $i, \"carried_bytes\": $carried, \"seconds\": $(secs "$t")},"
done
t=$(date +%s.%N)
"$PY" scripts/gpu_check.py --rehearse --out "$scratch/gc" --failed "${kernels[@]}"  # the rerun of what failed
calls="$calls{\"copy\": $((n + 1)), \"carried_bytes\": 0, \"seconds\": $(secs "$t")}"
"$PY" - "$scratch/first-pass.json" "$n" "[$calls]" "$(du -sb "$GPU_SITE" | cut -f1)" "$dest/rehearsal.json" <<'PYEOF'
import json, sys
first, parts, calls, site, out = json.load(open(sys.argv[1])), int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
steps = [{k: s.get(k) for k in ("name", "rc", "seconds", "limit", "kernels")} for s in first["steps"]]
report = {"parts": parts, "copies": calls, "unpacked_site_bytes": site, "first_pass": steps,
          "first_pass_within_limits": all(s["rc"] == 0 and (s["kernels"] or {}).get("compile_seconds", 0) <= s["limit"]
                                          for s in steps)}
open(out, "w").write(json.dumps(report, indent=1) + "\n")
print(json.dumps(report))
PYEOF
