/* fbx_ops_string.h -- split, lower, substring, fill.
 * Variable-length results follow the two-phase pool protocol: called with out == NULL the
 * function returns the size it needs (elements; and *nbytes for string lists); called again
 * with room from the pool it writes.  Null rule: null in, null out (fill_str excepted). */
#ifndef FBX_OPS_STRING_H
#define FBX_OPS_STRING_H

#include "fbx_views.h"
#include "fbx_ops_hash.h"

/* Index of the next occurrence of sep in s at or after from, or s.n. */
FBX_DEVICE fbx_i64 fbx_find(fbx_str s, fbx_i64 from, const char* sep, int seplen) {
  if (seplen == 1) {
    char c = sep[0];
    for (fbx_i64 i = from; i < s.n; ++i) if (s.p[i] == c) return i;
    return s.n;
  }
  for (fbx_i64 i = from; i + seplen <= s.n; ++i) {
    int k = 0;
    while (k < seplen && s.p[i + k] == sep[k]) ++k;
    if (k == seplen) return i;
  }
  return s.n;
}

/* Split on every occurrence of sep, empty pieces removed; hash each token. */
FBX_DEVICE fbx_i64 fbx_split_hash(fbx_str s, const char* sep, int seplen, fbx_i64 buckets, fbx_i64* out) {
  fbx_i64 n = 0, start = 0;
  while (start <= s.n) {
    fbx_i64 end = fbx_find(s, start, sep, seplen);
    if (end > start) {
      if (out) out[n] = fbx_bucket_of(fbx_fp64(s.p + start, end - start), buckets);
      ++n;
    }
    start = end + seplen;
  }
  return n;
}

/* Split on every occurrence of sep, empty pieces removed; the tokens as a string list. */
FBX_DEVICE fbx_i64 fbx_split_str(fbx_str s, const char* sep, int seplen, fbx_i64* ends, char* bytes, fbx_i64* nbytes) {
  fbx_i64 n = 0, nb = 0, start = 0;
  while (start <= s.n) {
    fbx_i64 end = fbx_find(s, start, sep, seplen);
    if (end > start) {
      if (bytes) { fbx_memcpy(bytes + nb, s.p + start, end - start); ends[n] = nb + (end - start); }
      nb += end - start;
      ++n;
    }
    start = end + seplen;
  }
  *nbytes = nb;
  return n;
}

/* ASCII lower case; other bytes (UTF-8 included) unchanged. */
FBX_DEVICE fbx_i64 fbx_lower(fbx_str s, char* out) {
  if (out) for (fbx_i64 i = 0; i < s.n; ++i) {
    char c = s.p[i];
    out[i] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
  }
  return s.n;
}

/* Code points [start, start + length) of UTF-8 text, Python slice rules for a negative
 * start (counted from the end); length < 0 means "to the end". */
FBX_DEVICE fbx_i64 fbx_substring(fbx_str s, fbx_i64 start, fbx_i64 length, char* out) {
  fbx_i64 nchars = 0;
  if (start < 0) {
    for (fbx_i64 i = 0; i < s.n; ++i) nchars += ((s.p[i] & 0xC0) != 0x80);
    start = nchars + start;
    if (start < 0) start = 0;
  }
  /* no more code points than bytes: past them is the end (and start + length cannot overflow) */
  if (start > s.n) start = s.n;
  if (length > s.n) length = -1;
  fbx_i64 b0 = s.n, b1 = s.n, ci = -1;
  for (fbx_i64 i = 0; i < s.n; ++i) {
    if ((s.p[i] & 0xC0) != 0x80) {
      ++ci;
      if (ci == start) b0 = i;
      if (length >= 0 && ci == start + length) { b1 = i; break; }
    }
  }
  if (b0 > b1) b0 = b1;
  if (out) fbx_memcpy(out, s.p + b0, b1 - b0);
  return b1 - b0;
}

/* The string, or value when it is null. */
FBX_DEVICE fbx_i64 fbx_fill_str(fbx_str s, int valid, const char* value, fbx_i64 vlen, char* out) {
  if (!valid) { if (out) fbx_memcpy(out, value, vlen); return vlen; }
  if (out) fbx_memcpy(out, s.p, s.n);
  return s.n;
}

#endif /* FBX_OPS_STRING_H */
