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
/* A list of strings: token i is bytes[offs[i] .. offs[i+1]); offs has n + 1 entries. */
typedef struct { const fbx_i64* offs; const char* bytes; fbx_i64 n; } fbx_ls;

FBX_DEVICE fbx_str fbx_mk_str(const fbx_i64* offs, const char* bytes, fbx_i64 row) {
  fbx_str s; s.p = bytes + offs[row]; s.n = offs[row + 1] - offs[row]; return s;
}
FBX_DEVICE fbx_li fbx_mk_li(const fbx_i64* offs, const fbx_i64* vals, fbx_i64 row) {
  fbx_li l; l.p = vals + offs[row]; l.n = offs[row + 1] - offs[row]; return l;
}
FBX_DEVICE fbx_ls fbx_mk_ls(const fbx_i64* loffs, const fbx_i64* soffs, const char* bytes, fbx_i64 row) {
  fbx_ls l; l.offs = soffs + loffs[row]; l.bytes = bytes; l.n = loffs[row + 1] - loffs[row]; return l;
}
FBX_DEVICE fbx_str fbx_ls_get(fbx_ls l, fbx_i64 i) {
  fbx_str s; s.p = l.bytes + l.offs[i]; s.n = l.offs[i + 1] - l.offs[i]; return s;
}

/* Error bits a kernel may raise through its error word (the host turns them into exceptions). */
#define FBX_ERR_POOL_OVERFLOW 1
#define FBX_ERR_KEY_TOO_LONG 2
/* Longest concatenated key (cross / ngram text) hashed in one piece. */
#define FBX_KEY_MAX 4096

#endif /* FBX_VIEWS_H */
