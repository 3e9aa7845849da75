/* fbx_views.h -- per-row views of Arrow values, shared by every operator's device functions.
 *
 * A kernel loads each input of a row into one of these views straight from the Arrow
 * buffers (offsets are int64 on both targets: large_string / large_list layouts), and
 * passes it by value to the operator's device function.
 */
#ifndef FBX_VIEWS_H
#define FBX_VIEWS_H

#include "fbx_target.h"

/* A string: n bytes at p (not terminated). */
typedef struct { const char* p; fbx_i64 n; } fbx_str;
/* A list of 64-bit integers (int64 or uint64 storage). */
typedef struct { const fbx_i64* p; fbx_i64 n; } fbx_li;
/* A list of strings: token i is bytes[off(i) .. off(i+1)) with off from offs (int64) or,
 * when offs32 is set, from offs32 (a cudf strings child with int32 offsets); n tokens. */
typedef struct { const fbx_i64* offs; const fbx_i32* offs32; const char* bytes; fbx_i64 n; } fbx_ls;

/* Views of row r, from its [begin, end) in the offsets (the kernel reads the offsets in
 * their own width, int32 or int64, and passes them here widened). */
FBX_DEVICE fbx_str fbx_str_at(const char* bytes, fbx_i64 b, fbx_i64 e) {
  fbx_str s; s.p = bytes + b; s.n = e - b; return s;
}
FBX_DEVICE fbx_li fbx_li_at(const fbx_i64* vals, fbx_i64 b, fbx_i64 e) {
  fbx_li l; l.p = vals + b; l.n = e - b; return l;
}
FBX_DEVICE fbx_ls fbx_ls_at(const fbx_i64* soffs, const fbx_i32* soffs32, const char* bytes, fbx_i64 b, fbx_i64 e) {
  fbx_ls l; l.offs = soffs32 ? NULL : soffs + b; l.offs32 = soffs32 ? soffs32 + b : NULL; l.bytes = bytes; l.n = e - b;
  return l;
}
/* The offset of token i of a string list (0 <= i <= n). */
FBX_DEVICE fbx_i64 fbx_ls_off(fbx_ls l, fbx_i64 i) {
  return l.offs32 ? (fbx_i64)l.offs32[i] : l.offs[i];
}
FBX_DEVICE fbx_str fbx_ls_get(fbx_ls l, fbx_i64 i) {
  fbx_str s; s.p = l.bytes + fbx_ls_off(l, i); s.n = fbx_ls_off(l, i + 1) - fbx_ls_off(l, i); return s;
}
/* Row r's views over int64 offsets (the host layout). */
FBX_DEVICE fbx_str fbx_mk_str(const fbx_i64* offs, const char* bytes, fbx_i64 row) {
  return fbx_str_at(bytes, offs[row], offs[row + 1]);
}
FBX_DEVICE fbx_li fbx_mk_li(const fbx_i64* offs, const fbx_i64* vals, fbx_i64 row) {
  return fbx_li_at(vals, offs[row], offs[row + 1]);
}
FBX_DEVICE fbx_ls fbx_mk_ls(const fbx_i64* loffs, const fbx_i64* soffs, const char* bytes, fbx_i64 row) {
  return fbx_ls_at(soffs, NULL, bytes, loffs[row], loffs[row + 1]);
}

/* FBX_ERR_* (error bits of a kernel's error word) and FBX_KEY_MAX (longest concatenated
 * key hashed in one piece) are defined once, in fbrapids/kernels/abi.py, and rendered
 * ahead of these headers by fbrapids.kernels.headers.inline_headers. */

#endif /* FBX_VIEWS_H */
