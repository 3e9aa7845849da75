#!/usr/bin/env bash
# The device run of docs/gpu.md rehearsed here, on the CPU: the same four calls in order, each
# given only what its `carry` would bring (checked <= 64 MiB), in a scratch folder standing in for
# the device's /tmp; only the device steps are stubs (cudf's import check, and each gpu_check step's
# command via `gpu_check.py --rehearse`).  From the project root, after scripts/gpu_pack.sh:
#     scripts/gpu_rehearse.sh [.gpu]        -> one JSON line: per call, the bytes carried and seconds
set -euo pipefail
dest=${1:-.gpu}
root=$(pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export GPU_WC="$scratch/wc" GPU_SITE="$scratch/site" GPU_NO_BUILD=1
# the stub of cudf's import check: the set unpacked whole, at the pinned version
export GPU_UNPACK_CHECK='test -f "$GPU_SITE/cudf/__init__.py" && ls -d "$GPU_SITE"/cudf_cu13-26.10.2.dist-info >/dev/null && echo "cudf 26.10.2 unpacked (import stubbed: no device)"'
limit=$((64 * 1024 * 1024))
parts=$(ls -d "$dest"/c[0-9]* | sort)
n=$(echo "$parts" | wc -l)
calls=""
i=0
for p in $parts; do
  i=$((i + 1))
  carried=$(du -sb "$p" "$dest/setup" | awk '{s += $1} END {print s}')
  [ "$carried" -le "$limit" ] || { echo "call $i carries $carried bytes > 64 MiB" >&2; exit 1; }
  t=$(date +%s.%N)
  mkdir -p "$GPU_WC" && cp "$p"/* "$GPU_WC"/
  if [ "$i" -eq "$n" ]; then  # the last part's call unpacks and runs the check
    bash "$dest/setup/unpack.sh"
    python3 scripts/gpu_check.py --rehearse --out "$scratch/gc" --budget 330
  fi
  calls="$calls{\"call\": $i, \"carried_bytes\": $carried, \"seconds\": $(printf "%.2f" "$(echo "$(date +%s.%N) - $t" | bc)")},"
done
t=$(date +%s.%N)
python3 scripts/gpu_check.py --rehearse --out "$scratch/gc" --failed --budget 200  # the rerun call
calls="$calls{\"call\": $((n + 1)), \"carried_bytes\": 0, \"seconds\": $(printf "%.2f" "$(echo "$(date +%s.%N) - $t" | bc)")}"
planned=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['planned_seconds'])" "$scratch/gc/gpu-check.json")
echo "{\"transfers\": $n, \"calls\": [$calls], \"unpacked_site_bytes\": $(du -sb "$GPU_SITE" | cut -f1), \"rerun_planned_seconds\": $planned}"
