/* fbx_ops_cross.h -- hashed feature crosses of N inputs.
 *
 * Each input is a scalar (a list of one) or a list; the result enumerates the cartesian
 * product with the first input outermost ("i-major"), keeps at most cap combinations
 * (cap <= 0: all), and hashes str(x1) + sep + ... + sep + str(xk), integers as decimal text.
 * A key of any length hashes: one longer than FBX_KEY_MAX bytes is fed to the streaming
 * hasher (fbx_fps) piece by piece instead of being assembled in a buffer.
 * Null rule: a null input gives a null output; an empty list gives an empty result. */
#ifndef FBX_OPS_CROSS_H
#define FBX_OPS_CROSS_H

#include "fbx_views.h"
#include "fbx_ops_hash.h"

#define FBX_X_I64 0
#define FBX_X_U64 1
#define FBX_X_STR 2
#define FBX_X_LI64 3
#define FBX_X_LU64 4
#define FBX_X_LSTR 5

typedef struct { int kind; fbx_i64 iv; fbx_str s; fbx_li li; fbx_ls ls; } fbx_xin;

FBX_DEVICE fbx_xin fbx_x_i64(fbx_i64 v) { fbx_xin x; x.kind = FBX_X_I64; x.iv = v; return x; }
FBX_DEVICE fbx_xin fbx_x_u64(fbx_u64 v) { fbx_xin x; x.kind = FBX_X_U64; x.iv = (fbx_i64)v; return x; }
FBX_DEVICE fbx_xin fbx_x_str(fbx_str v) { fbx_xin x; x.kind = FBX_X_STR; x.s = v; return x; }
FBX_DEVICE fbx_xin fbx_x_li64(fbx_li v) { fbx_xin x; x.kind = FBX_X_LI64; x.li = v; return x; }
FBX_DEVICE fbx_xin fbx_x_lu64(fbx_li v) { fbx_xin x; x.kind = FBX_X_LU64; x.li = v; return x; }
FBX_DEVICE fbx_xin fbx_x_lstr(fbx_ls v) { fbx_xin x; x.kind = FBX_X_LSTR; x.ls = v; return x; }

FBX_DEVICE fbx_i64 fbx_x_len(const fbx_xin* x) {
  if (x->kind == FBX_X_LI64 || x->kind == FBX_X_LU64) return x->li.n;
  if (x->kind == FBX_X_LSTR) return x->ls.n;
  return 1;
}

/* Appends the text of element i of x at buf + len; returns the new length or -1 when it
 * would pass FBX_KEY_MAX. */
FBX_DEVICE fbx_i64 fbx_x_put(const fbx_xin* x, fbx_i64 i, char* buf, fbx_i64 len) {
  if (len + 24 > FBX_KEY_MAX && x->kind != FBX_X_STR && x->kind != FBX_X_LSTR) return -1;
  switch (x->kind) {
    case FBX_X_I64: return len + fbx_i64_to_dec(x->iv, buf + len);
    case FBX_X_U64: return len + fbx_u64_to_dec((fbx_u64)x->iv, buf + len);
    case FBX_X_LI64: return len + fbx_i64_to_dec(x->li.p[i], buf + len);
    case FBX_X_LU64: return len + fbx_u64_to_dec((fbx_u64)x->li.p[i], buf + len);
    default: {
      fbx_str s = x->kind == FBX_X_STR ? x->s : fbx_ls_get(x->ls, i);
      if (len + s.n > FBX_KEY_MAX) return -1;
      fbx_memcpy(buf + len, s.p, s.n);
      return len + s.n;
    }
  }
}

/* The text of element i of x (integers rendered into tmp, 24 bytes). */
FBX_DEVICE fbx_str fbx_x_text(const fbx_xin* x, fbx_i64 i, char* tmp) {
  fbx_str s;
  s.p = tmp;
  switch (x->kind) {
    case FBX_X_I64: s.n = fbx_i64_to_dec(x->iv, tmp); return s;
    case FBX_X_U64: s.n = fbx_u64_to_dec((fbx_u64)x->iv, tmp); return s;
    case FBX_X_LI64: s.n = fbx_i64_to_dec(x->li.p[i], tmp); return s;
    case FBX_X_LU64: s.n = fbx_u64_to_dec((fbx_u64)x->li.p[i], tmp); return s;
    case FBX_X_STR: return x->s;
    default: return fbx_ls_get(x->ls, i);
  }
}

/* Fingerprint of the key of combination idx, fed in pieces (a key of any length). */
FBX_DEVICE fbx_u64 fbx_cross_fp_long(const fbx_xin* xs, int k, const fbx_i64* idx, const char* sep, int seplen) {
  char tmp[24];
  fbx_u64 len = 0;
  for (int j = 0; j < k; ++j) len += (j ? seplen : 0) + fbx_x_text(&xs[j], idx[j], tmp).n;
  fbx_fps h;
  fbx_fps_init(&h, len);
  for (int j = 0; j < k; ++j) {
    if (j) fbx_fps_put(&h, sep, seplen);
    fbx_str s = fbx_x_text(&xs[j], idx[j], tmp);
    fbx_fps_put(&h, s.p, s.n);
  }
  return fbx_fps_done(&h);
}

#if !FBX_CUDA
/* Host: the innermost input varies fastest, so each of its elements is rendered once per
 * combination of the outer inputs.  When it is an integer list of at most FBX_X_CACHE
 * elements, its decimal texts are rendered once per row into this cache instead. */
#define FBX_X_CACHE 64
typedef struct { fbx_i64 n; fbx_i64 start[FBX_X_CACHE + 1]; char text[FBX_X_CACHE * 20]; } fbx_xcache;

FBX_DEVICE int fbx_xcache_fill(const fbx_xin* x, fbx_xcache* c) {
  if ((x->kind != FBX_X_LI64 && x->kind != FBX_X_LU64) || x->li.n > FBX_X_CACHE) return 0;
  fbx_i64 len = 0;
  c->n = x->li.n;
  c->start[0] = 0;
  for (fbx_i64 i = 0; i < x->li.n; ++i) {
    len += x->kind == FBX_X_LI64 ? fbx_i64_to_dec(x->li.p[i], c->text + len)
                                 : fbx_u64_to_dec((fbx_u64)x->li.p[i], c->text + len);
    c->start[i + 1] = len;
  }
  return 1;
}
#endif

#if !FBX_CUDA
/* Host: two integer lists of at most FBX_X_CACHE elements each (a token x token cross):
 * both lists' decimal texts rendered once per row, each key assembled from them and hashed.
 * The same keys in the same order (first input outermost) as the general loop below;
 * returns 0 (nothing written) when the inputs are not of that form. */
FBX_DEVICE int fbx_cross2_lists(const fbx_xin* xs, const char* sep, int seplen, fbx_i64 buckets, fbx_i64 total,
                                fbx_i64* out) {
  if (seplen > 8) return 0;
  fbx_xcache ca, cb;
  if (!fbx_xcache_fill(&xs[0], &ca) || !fbx_xcache_fill(&xs[1], &cb)) return 0;
  char buf[48];  /* 20 digits + a separator of at most 8 bytes + 20 digits */
  fbx_i64 c = 0;
  for (fbx_i64 i = 0; i < ca.n && c < total; ++i) {
    const fbx_i64 la = ca.start[i + 1] - ca.start[i];
    for (fbx_i64 b = 0; b < la; ++b) buf[b] = ca.text[ca.start[i] + b];
    for (int b = 0; b < seplen; ++b) buf[la + b] = sep[b];
    const fbx_i64 pre = la + seplen;
    for (fbx_i64 j = 0; j < cb.n && c < total; ++j, ++c) {
      const fbx_i64 s0 = cb.start[j], lb = cb.start[j + 1] - s0;
      for (fbx_i64 b = 0; b < lb; ++b) buf[pre + b] = cb.text[s0 + b];
      out[c] = fbx_bucket_of(fbx_fp64(buf, pre + lb), buckets);
    }
  }
  return 1;
}
#endif

/* Number of combinations (capped); writes their hashes when out != NULL. */
FBX_DEVICE fbx_i64 fbx_cross(const fbx_xin* xs, int k, const char* sep, int seplen, fbx_i64 buckets,
                             fbx_i64 cap, fbx_i32* err, fbx_i64* out) {
  fbx_i64 total = 1;
  for (int j = 0; j < k; ++j) {
    fbx_i64 n = fbx_x_len(&xs[j]);
    if (n == 0) return 0;
    if (cap > 0 && total > cap) continue;  /* already past the cap: avoid overflow */
    total *= n;
  }
  if (cap > 0 && total > cap) total = cap;
  if (!out) return total;
#if !FBX_CUDA
  if (k == 2 && fbx_cross2_lists(xs, sep, seplen, buckets, total, out)) return total;
#endif
  fbx_i64 idx[16], plen[17];
  for (int j = 0; j < k; ++j) idx[j] = 0;
  plen[0] = 0;
  char buf[FBX_KEY_MAX];
  int from = 0;  /* the first input whose text changed since the last combination */
#if !FBX_CUDA
  fbx_xcache cache;
  const int cached = k > 1 && fbx_xcache_fill(&xs[k - 1], &cache);
#endif
  for (fbx_i64 c = 0; c < total; ++c) {
    fbx_i64 len = plen[from];
    int j;
    for (j = from; j < k; ++j) {  /* the key's prefix up to input `from` is reused */
      if (j) {
        if (len + seplen > FBX_KEY_MAX) { len = -1; break; }
        fbx_memcpy(buf + len, sep, seplen); len += seplen;
      }
#if !FBX_CUDA
      if (cached && j == k - 1) {
        const fbx_i64 s0 = cache.start[idx[j]], tn = cache.start[idx[j] + 1] - s0;
        if (len + 24 > FBX_KEY_MAX) { len = -1; break; }
        for (fbx_i64 b = 0; b < tn; ++b) buf[len + b] = cache.text[s0 + b];
        len += tn;
        plen[j + 1] = len;
        continue;
      }
#endif
      len = fbx_x_put(&xs[j], idx[j], buf, len);
      if (len < 0) break;
      plen[j + 1] = len;
    }
    const int valid_upto = len < 0 ? j : k;  /* plen[0 .. valid_upto] hold this key's prefixes */
    out[c] = fbx_bucket_of(len < 0 ? fbx_cross_fp_long(xs, k, idx, sep, seplen) : fbx_fp64(buf, len), buckets);
    for (j = k - 1; j >= 0; --j) {  /* odometer: the last input varies fastest */
      if (++idx[j] < fbx_x_len(&xs[j])) { from = j; break; }
      idx[j] = 0;
    }
    if (from > valid_upto) from = valid_upto;
  }
  return total;
}

#endif /* FBX_OPS_CROSS_H */
