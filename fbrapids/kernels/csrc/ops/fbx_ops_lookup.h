/* fbx_ops_lookup.h -- dictionary lookup (value -> id) through an open-addressing table
 * built on the host: slots[] holds a key index or -1, probed linearly from hash & mask.
 * Null rule: a null input gives the out-of-vocabulary id (nulls are not in any vocabulary). */
#ifndef FBX_OPS_LOOKUP_H
#define FBX_OPS_LOOKUP_H

#include "fbx_views.h"
#include "farmhash.h"

FBX_DEVICE fbx_u64 fbx_mix64(fbx_u64 z) {  /* splitmix64 finaliser */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

FBX_DEVICE fbx_i64 fbx_lookup_int(fbx_i64 key, const fbx_i64* slots, const fbx_i64* keys,
                                  const fbx_i64* ids, fbx_i64 mask, fbx_i64 oov) {
  fbx_u64 h = fbx_mix64((fbx_u64)key) & (fbx_u64)mask;
  for (;;) {
    fbx_i64 k = slots[h];
    if (k < 0) return oov;
    if (keys[k] == key) return ids[k];
    h = (h + 1) & (fbx_u64)mask;
  }
}

FBX_DEVICE fbx_i64 fbx_lookup_str(fbx_str key, const fbx_i64* slots, const fbx_i64* koffs,
                                  const char* kbytes, const fbx_i64* ids, fbx_i64 mask, fbx_i64 oov) {
  fbx_u64 h = fbx_fp64(key.p, key.n) & (fbx_u64)mask;
  for (;;) {
    fbx_i64 k = slots[h];
    if (k < 0) return oov;
    fbx_i64 n = koffs[k + 1] - koffs[k];
    if (n == key.n) {
      const char* q = kbytes + koffs[k];
      fbx_i64 i = 0;
      while (i < n && q[i] == key.p[i]) ++i;
      if (i == n) return ids[k];
    }
    h = (h + 1) & (fbx_u64)mask;
  }
}

#endif /* FBX_OPS_LOOKUP_H */
