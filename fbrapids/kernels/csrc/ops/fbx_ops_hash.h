/* fbx_ops_hash.h -- FarmHash Fingerprint64 of values, and TensorFlow hash buckets.
 * Integers hash through their decimal text; buckets <= 0 means "the raw fingerprint"
 * (returned in int64 storage, read back as uint64).  Null rule: null in, null out. */
#ifndef FBX_OPS_HASH_H
#define FBX_OPS_HASH_H

#include "fbx_views.h"
#include "farmhash.h"

FBX_DEVICE fbx_i64 fbx_bucket_of(fbx_u64 fp, fbx_i64 buckets) {
  return buckets > 0 ? fbx_hash_bucket(fp, buckets) : (fbx_i64)fp;
}
FBX_DEVICE fbx_i64 fbx_hb_str(fbx_str s, fbx_i64 buckets) {
  return fbx_bucket_of(fbx_fp64(s.p, s.n), buckets);
}
FBX_DEVICE fbx_i64 fbx_hb_i64(fbx_i64 v, fbx_i64 buckets) {
  char buf[24];
  int n = fbx_i64_to_dec(v, buf);
  return fbx_bucket_of(fbx_fp64(buf, n), buckets);
}
FBX_DEVICE fbx_i64 fbx_hb_u64(fbx_u64 v, fbx_i64 buckets) {
  char buf[24];
  int n = fbx_u64_to_dec(v, buf);
  return fbx_bucket_of(fbx_fp64(buf, n), buckets);
}

/* Element-wise over lists: returns the element count; writes when out != NULL. */
FBX_DEVICE fbx_i64 fbx_hb_list_str(fbx_ls l, fbx_i64 buckets, fbx_i64* out) {
  if (out) for (fbx_i64 i = 0; i < l.n; ++i) out[i] = fbx_hb_str(fbx_ls_get(l, i), buckets);
  return l.n;
}
FBX_DEVICE fbx_i64 fbx_hb_list_i64(fbx_li l, fbx_i64 buckets, fbx_i64* out) {
  if (out) for (fbx_i64 i = 0; i < l.n; ++i) out[i] = fbx_hb_i64(l.p[i], buckets);
  return l.n;
}
FBX_DEVICE fbx_i64 fbx_hb_list_u64(fbx_li l, fbx_i64 buckets, fbx_i64* out) {
  if (out) for (fbx_i64 i = 0; i < l.n; ++i) out[i] = fbx_hb_u64((fbx_u64)l.p[i], buckets);
  return l.n;
}

#endif /* FBX_OPS_HASH_H */
