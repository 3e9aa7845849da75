#!/usr/bin/env bash
# Runs ON the GPU machine, in the project root, once every part of the cudf set is in /tmp/wc
# (scripts/gpu_pack.sh made them; docs/gpu.md gives the calls).  Unpacks the one xz archive into
# /tmp/site, builds pyfarmhash (a test oracle) from source when its tarball travelled in
# .gpu/setup, and checks that cudf imports and sees the device.  Then: export PYTHONPATH=/tmp/site:$PWD
set -eu
t0=$(date +%s)
WC=${GPU_WC:-/tmp/wc}; SITE=${GPU_SITE:-/tmp/site}  # the rehearsal moves them
mkdir -p "$SITE"
if command -v xz >/dev/null 2>&1; then
  cat $(ls "$WC"/part* | sort) | xz -dc -T0 | tar xf - -C "$SITE"
else  # Python's lzma: always there
  cat $(ls "$WC"/part* | sort) | python3 -c "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall(sys.argv[1])" "$SITE"
fi
rm -rf "$WC"
here=$(dirname "$0")
if [ -z "${GPU_NO_BUILD:-}" ] && ls "$here"/pyfarmhash-*.tar.gz >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$SITE" "$here"/pyfarmhash-*.tar.gz > /tmp/pip2.log 2>&1 || tail -3 /tmp/pip2.log
fi
if [ -n "${GPU_UNPACK_CHECK:-}" ]; then  # the rehearsal's stub (no device there)
  eval "$GPU_UNPACK_CHECK"
else
  # a libcudf kernel run too: the set keeps only sm_90 device code (gpu_pack.sh's GPU_ONLY_ARCH)
  PYTHONPATH="$SITE" python3 -c "import cudf, dask_cudf, dask_cuda; s = cudf.Series([3, 1, 2]).sort_values(); assert s.tolist() == [1, 2, 3]; print('cudf', cudf.__version__, 'on', __import__('cupy').cuda.runtime.getDeviceProperties(0)['name'].decode(), ': a libcudf kernel ran')"
fi
echo "unpacked in $(( $(date +%s) - t0 )) s; now: export PYTHONPATH=$SITE:$PWD"
