/* fbx_host_helpers.c -- host helpers around the meta-kernels: compaction of pool-resident
 * variable-length results into Arrow buffers (before the pool is reset), and building the
 * open-addressing tables of lookup operators.  Compiled once per machine (cached). */
#include "ops/fbx_views.h"
#include "ops/fbx_ops_lookup.h"
#include <string.h>

/* values[out_off[r] ..] = pool[off[r] ..], cnt[r] elements of elem bytes; out_off is the
 * exclusive prefix sum of cnt (n + 1 entries). */
FBX_KERNEL void fbx_compact(fbx_i64 n, const char* pool, const fbx_i64* off, const fbx_i64* cnt,
                            fbx_i64 elem, const fbx_i64* out_off, char* values, fbx_i64 block) {
  /* A kernel block's rows sit back to back, in row order, in its pool region: one copy per block. */
  const fbx_i64 nblocks = (n + block - 1) / block;
  (void)cnt;
  #pragma omp parallel for schedule(static, 16) if (nblocks >= 64)
  for (fbx_i64 b = 0; b < nblocks; ++b) {
    const fbx_i64 r0 = b * block, r1 = r0 + block < n ? r0 + block : n;
    fbx_i64 r = r0;
    while (r < r1 && cnt[r] == 0) ++r;
    if (r == r1) continue;
    memcpy(values + out_off[r] * elem, pool + off[r], (size_t)((out_off[r1] - out_off[r]) * elem));
  }
}

/* A list<str> result: tokens (ends relative to the row's bytes, in the pool at offa) and
 * bytes (at offb) into Arrow string offsets + bytes.  loff / boff: prefix sums of the
 * token and byte counts. */
FBX_KERNEL void fbx_compact_ls(fbx_i64 n, const char* pool, const fbx_i64* offa, const fbx_i64* cnta,
                               const fbx_i64* offb, const fbx_i64* cntb, const fbx_i64* loff,
                               const fbx_i64* boff, fbx_i64* soffs, char* bytes) {
  #pragma omp parallel for schedule(static, 4096) if (n >= 16384)
  for (fbx_i64 r = 0; r < n; ++r) {
    const fbx_i64* ends = (const fbx_i64*)(pool + offa[r]);
    for (fbx_i64 i = 0; i < cnta[r]; ++i) soffs[loff[r] + i + 1] = boff[r] + ends[i];
    if (cntb[r] > 0) memcpy(bytes + boff[r], pool + offb[r], (size_t)cntb[r]);
  }
  soffs[0] = 0;
}

/* slots[] (size mask + 1, filled with -1) <- key indexes, linear probing. */
FBX_KERNEL void fbx_table_int(fbx_i64 nkeys, const fbx_i64* keys, fbx_i64* slots, fbx_i64 mask) {
  for (fbx_i64 k = 0; k < nkeys; ++k) {
    fbx_u64 h = fbx_mix64((fbx_u64)keys[k]) & (fbx_u64)mask;
    while (slots[h] >= 0) h = (h + 1) & (fbx_u64)mask;
    slots[h] = k;
  }
}

FBX_KERNEL void fbx_table_str(fbx_i64 nkeys, const fbx_i64* koffs, const char* kbytes, fbx_i64* slots, fbx_i64 mask) {
  for (fbx_i64 k = 0; k < nkeys; ++k) {
    fbx_u64 h = fbx_fp64(kbytes + koffs[k], koffs[k + 1] - koffs[k]) & (fbx_u64)mask;
    while (slots[h] >= 0) h = (h + 1) & (fbx_u64)mask;
    slots[h] = k;
  }
}
