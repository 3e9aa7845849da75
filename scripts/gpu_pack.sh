#!/usr/bin/env bash
# The GPU set packed for a GPU host without a package index (docs/gpu.md, "An offline install").
# From the project root, on a machine that reaches the index (no GPU needed):
#     scripts/gpu_pack.sh [.gpu]
# Downloads the Python 3.12 wheels of scripts/gpu_wheels.txt into .gpu/wheels (once; pyfarmhash's
# source, a test oracle built on the host, into .gpu/setup), unpacks them into one site-packages
# folder (as pip installs them for Python 3.12 x86_64), zeroes the device code for GPUs other than
# GPU_ONLY_ARCH (default 90: H100 / H200; scripts/gpu_slim_fatbin.py), packs it as ONE xz archive
# (shared libraries compress well; the wheels are zip-deflated one file at a time), and cuts the
# archive into parts of at most GPU_PART_BYTES under .gpu/c0 .. .gpu/cN, beside
# .gpu/setup/unpack.sh (run on the host).  .gpu/pack.json records the sizes and the part count.
set -euo pipefail
dest=${1:-.gpu}
part=${GPU_PART_BYTES:-60000000}
level=${GPU_XZ_LEVEL:-6}
here=$(cd "$(dirname "$0")" && pwd)
plat="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
mkdir -p "$dest/wheels" "$dest/setup"
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat \
  -d "$dest/wheels" -r "$here/gpu_wheels.txt" 2>&1 | grep -v "^WARNING" || true
ls "$dest"/setup/pyfarmhash-*.tar.gz >/dev/null 2>&1 \
  || python3 -m pip download -q --no-deps --no-binary=:all: -d "$dest/setup" pyfarmhash==0.5.1 2>&1 | grep -v "^WARNING" || true
ls "$dest"/wheels/cudf_cu13-*.whl >/dev/null 2>&1 || { echo "no cudf wheel in $dest/wheels (no package index?)" >&2; exit 2; }
rm -rf "$dest/site" "$dest"/c[0-9]* "$dest/site.tar.xz"
python3 -m pip install -q --no-deps --no-compile --no-index --only-binary=:all: --python-version 3.12 \
  --implementation cp $plat --target "$dest/site" "$dest"/wheels/*.whl 2>&1 | grep -v "^WARNING" || true
# numba-cuda 0.30 (there) still calls numpy.row_stack, which numpy 2.5 (there) removed
printf 'import numpy\nif not hasattr(numpy, "row_stack"):\n    numpy.row_stack = numpy.vstack\n' > "$dest/site/sitecustomize.py"
find "$dest/site" -name __pycache__ -prune -exec rm -rf {} +
unpacked=$(du -sb "$dest/site" | cut -f1)
# the device code for architectures other than GPU_ONLY_ARCH zeroed (scripts/gpu_slim_fatbin.py;
# GPU_ONLY_ARCH= keeps it all, in about twice the parts)
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
wheels=$(ls "$dest"/wheels/*.whl | wc -l)
echo "{\"wheels\": $wheels, \"unpacked_bytes\": $unpacked, \"zeroed_device_code_bytes\": $zeroed, \"only_arch\": \"${arch:-all}\", \"packed_bytes\": $packed, \"parts\": $n, \"part_bytes\": $part, \"xz_level\": $level, \"host_packages\": [\"torch\", \"cupy\", \"numba\", \"numpy\", \"pandas\", \"pyarrow\"], \"built_on_host\": [\"farmhash\"]}" \
  | tee "$dest/pack.json"
