/* fbx_ops_list.h -- n-grams over token lists, first_k / last_k, list fill.
 * Two-phase pool protocol as in fbx_ops_string.h.  Null rule: null in, null out. */
#ifndef FBX_OPS_LIST_H
#define FBX_OPS_LIST_H

#include "fbx_views.h"
#include "fbx_ops_hash.h"

/* Fingerprint of n-gram i of t, fed in pieces (an n-gram of any length). */
FBX_DEVICE fbx_u64 fbx_ngram_fp_long(fbx_ls t, fbx_i64 i, fbx_i64 k, const char* sep, int seplen) {
  fbx_u64 len = 0;
  for (fbx_i64 j = 0; j < k; ++j) len += (j ? seplen : 0) + fbx_ls_get(t, i + j).n;
  fbx_fps h;
  fbx_fps_init(&h, len);
  for (fbx_i64 j = 0; j < k; ++j) {
    fbx_str w = fbx_ls_get(t, i + j);
    if (j) fbx_fps_put(&h, sep, seplen);
    fbx_fps_put(&h, w.p, w.n);
  }
  return fbx_fps_done(&h);
}

/* Hashes of the n-grams (k consecutive tokens joined by sep); an n-gram longer than
 * FBX_KEY_MAX bytes is hashed piece by piece (any length hashes). */
FBX_DEVICE fbx_i64 fbx_ngrams_hash(fbx_ls t, fbx_i64 k, const char* sep, int seplen, fbx_i64 buckets,
                                   fbx_i32* err, fbx_i64* out) {
  fbx_i64 n = t.n >= k ? t.n - k + 1 : 0;
  if (!out) return n;
  char buf[FBX_KEY_MAX];
  for (fbx_i64 i = 0; i < n; ++i) {
    fbx_i64 len = 0;
    for (fbx_i64 j = 0; j < k; ++j) {
      fbx_str w = fbx_ls_get(t, i + j);
      if (len + w.n + seplen > FBX_KEY_MAX) { len = -1; break; }
      if (j) { fbx_memcpy(buf + len, sep, seplen); len += seplen; }
      fbx_memcpy(buf + len, w.p, w.n); len += w.n;
    }
    out[i] = fbx_bucket_of(len < 0 ? fbx_ngram_fp_long(t, i, k, sep, seplen) : fbx_fp64(buf, len), buckets);
  }
  return n;
}

/* The n-grams as strings. */
FBX_DEVICE fbx_i64 fbx_ngrams_str(fbx_ls t, fbx_i64 k, const char* sep, int seplen,
                                  fbx_i64* ends, char* bytes, fbx_i64* nbytes) {
  fbx_i64 n = t.n >= k ? t.n - k + 1 : 0, nb = 0;
  for (fbx_i64 i = 0; i < n; ++i) {
    for (fbx_i64 j = 0; j < k; ++j) {
      fbx_str w = fbx_ls_get(t, i + j);
      if (j) { if (bytes) fbx_memcpy(bytes + nb, sep, seplen); nb += seplen; }
      if (bytes) fbx_memcpy(bytes + nb, w.p, w.n);
      nb += w.n;
    }
    if (ends) ends[i] = nb;
  }
  *nbytes = nb;
  return n;
}

/* The first (from_end == 0) or last k elements of an integer list. */
FBX_DEVICE fbx_i64 fbx_slice_li(fbx_li l, fbx_i64 k, int from_end, fbx_i64* out) {
  fbx_i64 n = l.n < k ? l.n : k, s = from_end ? l.n - n : 0;
  if (out) for (fbx_i64 i = 0; i < n; ++i) out[i] = l.p[s + i];
  return n;
}

/* The first or last k elements of a string list. */
FBX_DEVICE fbx_i64 fbx_slice_ls(fbx_ls l, fbx_i64 k, int from_end, fbx_i64* ends, char* bytes, fbx_i64* nbytes) {
  fbx_i64 n = l.n < k ? l.n : k, s = from_end ? l.n - n : 0;
  fbx_i64 b0 = fbx_ls_off(l, s), nb = fbx_ls_off(l, s + n) - b0;
  if (bytes) {
    fbx_memcpy(bytes, l.bytes + b0, nb);
    for (fbx_i64 i = 0; i < n; ++i) ends[i] = fbx_ls_off(l, s + i + 1) - b0;
  }
  *nbytes = nb;
  return n;
}

/* An integer list, or the empty list when it is null. */
FBX_DEVICE fbx_i64 fbx_fill_li(fbx_li l, int valid, fbx_i64* out) {
  if (!valid) return 0;
  if (out) for (fbx_i64 i = 0; i < l.n; ++i) out[i] = l.p[i];
  return l.n;
}

#endif /* FBX_OPS_LIST_H */
