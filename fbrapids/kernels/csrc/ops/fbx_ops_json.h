/* fbx_ops_json.h -- json_get: the string at a dotted path of a strict JSON document.
 * Two-phase pool protocol; returns -1 (null) unless a string was found.  When status is not
 * NULL it receives json_path.h's status: 0 found, 1 malformed, 2 path missing, 3 not a string. */
#ifndef FBX_OPS_JSON_H
#define FBX_OPS_JSON_H

#include "fbx_views.h"
#include "json_path.h"

FBX_DEVICE fbx_i64 fbx_json_get(fbx_str doc, const char* path, fbx_i64 path_len, fbx_i8* status, char* out) {
  int st = 1;
  fbx_i64 n = fbx_json_get_string(doc.p, doc.n, path, path_len, out, &st);
  if (status) *status = (fbx_i8)st;
  return st == 0 ? n : -1;
}

#endif /* FBX_OPS_JSON_H */
