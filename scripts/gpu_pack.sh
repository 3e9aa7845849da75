#!/usr/bin/env bash
# The cudf set for a lent GPU machine in at most 3 transfers (docs/gpu.md).  From the project root,
# after ../shared/gpu/fetch-wheels (which leaves the Python 3.12 wheels in .gpu/wheels):
#     scripts/gpu_pack.sh [.gpu]
# Unpacks the wheels into one site-packages folder (as pip installs them for Python 3.12 x86_64),
# zeroes the device code for GPUs other than sm_90 (scripts/gpu_slim_fatbin.py), packs it as ONE xz archive (shared libraries compress well; the wheels are zip-deflated
# one file at a time), and cuts the archive into parts of at most 60,000,000 bytes under
# .gpu/c0 .. .gpu/cN, beside .gpu/setup/unpack.sh, which runs on the device.
set -euo pipefail
dest=${1:-.gpu}
part=${GPU_PART_BYTES:-60000000}
level=${GPU_XZ_LEVEL:-6}
[ -d "$dest/wheels" ] || { echo "no $dest/wheels: run ../shared/gpu/fetch-wheels first" >&2; exit 2; }
rm -rf "$dest/site" "$dest"/c[0-9]* "$dest/site.tar.xz"
plat="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
python3 -m pip install -q --no-deps --no-compile --no-index --only-binary=:all: --python-version 3.12 \
  --implementation cp $plat --target "$dest/site" "$dest"/wheels/*.whl 2>&1 | grep -v "^WARNING" || true
# numba-cuda 0.30 (there) still calls numpy.row_stack, which numpy 2.5 (there) removed
printf 'import numpy\nif not hasattr(numpy, "row_stack"):\n    numpy.row_stack = numpy.vstack\n' > "$dest/site/sitecustomize.py"
find "$dest/site" -name __pycache__ -prune -exec rm -rf {} +
unpacked=$(du -sb "$dest/site" | cut -f1)
# the lent machines (H100, H200) are sm_90: the device code for other architectures zeroed
# (scripts/gpu_slim_fatbin.py; GPU_ONLY_ARCH= keeps it all, in about twice the parts)
arch=${GPU_ONLY_ARCH-90}
if [ -n "$arch" ]; then
  find "$dest/site" -name "*.so*" -size +1M -print0 | xargs -0 python3 "$(dirname "$0")/gpu_slim_fatbin.py" --keep "$arch" \
    > "$dest/slim.json"
fi
tar cf - -C "$dest/site" . | xz -"$level" -T2 > "$dest/site.tar.xz"
packed=$(stat -c %s "$dest/site.tar.xz")
(cd "$dest" && split -b "$part" -d -a 1 site.tar.xz part)
n=0
for p in "$dest"/part*; do mkdir -p "$dest/c$n"; mv "$p" "$dest/c$n/"; n=$((n+1)); done
rm -f "$dest/site.tar.xz"
mkdir -p "$dest/setup"
cp "$(dirname "$0")/gpu_unpack.sh" "$dest/setup/unpack.sh"
zeroed=$( [ -f "$dest/slim.json" ] && python3 -c "import json,sys; print(sum(v['zeroed'] for v in json.load(open(sys.argv[1])).values()))" "$dest/slim.json" || echo 0)
echo "{\"unpacked_bytes\": $unpacked, \"zeroed_device_code_bytes\": $zeroed, \"only_arch\": \"${arch:-all}\", \"packed_bytes\": $packed, \"parts\": $n, \"part_bytes\": $part, \"xz_level\": $level}" \
  | tee "$dest/pack.json"
