/* fbx_ops_json.h -- the JSON operators over json_path.h:
 *
 *   json_get(doc, path)          the string at a dotted path of a strict JSON document;
 *   json_scan(doc, paths)        one pass over the document for several paths at once: a
 *                                list<i64> of one code per path, (value offset << 3) | status;
 *   json_pick(doc, scan, index)  the string json_scan found for its path `index`.
 *
 * json_get and json_pick follow the two-phase pool protocol and return -1 (null) unless a
 * string was found.  json_get's size phase (out == NULL) walks the document and keeps the
 * offset of the value's raw body in *scratch (a per-row slot the renderer hands over to
 * the write phase); its write phase only unescapes from there.  json_pick never walks: the
 * offset is in the code.  When status is not NULL it receives json_path.h's status: 0
 * found, 1 malformed, 2 path missing, 3 not a string (json_pick: also 4, malformed and
 * nested deeper than FBX_JSON_MAX_DEPTH). */
#ifndef FBX_OPS_JSON_H
#define FBX_OPS_JSON_H

#include "fbx_views.h"
#include "json_path.h"

FBX_DEVICE fbx_i64 fbx_json_get(fbx_str doc, const char* path, fbx_i64 path_len, fbx_i64 nseg, fbx_i8* status,
                                char* out, fbx_i64* scratch) {
  if (out != NULL) return fbx_json_unescape_to_quote(doc.p + *scratch, out);
  int st;
  fbx_i64 vs, vl;
  fbx_json_walk(doc.p, doc.n, path, &path_len, &nseg, 1, &st, &vs, &vl);
  if (status) *status = (fbx_i8)st;
  if (st != FBX_JSON_FOUND) return -1;
  fbx_i64 len = fbx_json_unescape(doc.p + vs, vl, NULL);
  if (len > 0) *scratch = vs;
  return len;
}

/* json_scan: npaths codes; the size phase only counts them, the write phase walks once. */
FBX_DEVICE fbx_i64 fbx_json_scan(fbx_str doc, const char* paths, const fbx_i64* path_lens,
                                 const fbx_i64* path_nsegs, int npaths, fbx_i64* out) {
  if (out == NULL) return npaths;
  int st[FBX_JSON_MAX_PATHS];
  fbx_i64 vs[FBX_JSON_MAX_PATHS], vl[FBX_JSON_MAX_PATHS];
  int deep = 0;
  if (fbx_json_walk(doc.p, doc.n, paths, path_lens, path_nsegs, npaths, st, vs, vl))
    deep = fbx_json_bracket_depth(doc.p, doc.n) > FBX_JSON_MAX_DEPTH;
  for (int k = 0; k < npaths; ++k)
    out[k] = (st[k] == FBX_JSON_FOUND ? vs[k] * 8 : 0) + (deep ? FBX_JSON_TOO_DEEP : st[k]);
  return npaths;
}

FBX_DEVICE fbx_i64 fbx_json_pick(fbx_str doc, fbx_li scan, fbx_i64 index, fbx_i8* status, char* out) {
  const fbx_i64 code = index < scan.n ? scan.p[index] : FBX_JSON_MALFORMED;
  const int st = (int)(code & 7);
  if (status) *status = (fbx_i8)st;
  if (st != FBX_JSON_FOUND) return -1;
  return fbx_json_unescape_to_quote(doc.p + (code >> 3), out);
}

#endif /* FBX_OPS_JSON_H */
