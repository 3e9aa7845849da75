/* fbx_ops_json.h -- the JSON operators over json_path.h:
 *
 *   json_get(doc, path)          the string at a dotted path of a strict JSON document;
 *   json_scan(doc, paths)        one pass over the document for up to 4 paths at once: an
 *                                int64 of one code per path, (value offset << 3) | status;
 *   json_pick(doc, scan, index)  the string json_scan found for its path `index`.
 *
 * json_get and json_pick follow the two-phase pool protocol and return -1 (null) unless a
 * string was found.  json_get's size phase (out == NULL) walks the document and keeps the
 * offset of the value's raw body in *scratch (a per-row slot the renderer hands over to
 * the write phase); its write phase only unescapes from there.  json_pick does not walk:
 * the offset is in the code (but for a value too far into a long document to fit it).  When status is not NULL it receives json_path.h's status: 0
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

#define FBX_JSON_SCAN_PATHS 4  /* paths one json_scan packs into its int64 */
#define FBX_JSON_LOOK_AGAIN 7  /* a code whose offset did not fit: json_pick walks the document itself */

/* json_scan: ONE walk for npaths (1 to FBX_JSON_SCAN_PATHS) paths; their codes packed in *out,
 * 64 / npaths bits each, path k's in bits [k * width, (k + 1) * width): (offset of the string
 * value's raw body << 3) | status, the status FBX_JSON_LOOK_AGAIN (and no offset) where the
 * offset does not fit the code's bits.  Returns 1 (never null on a value). */
FBX_DEVICE int fbx_json_scan(fbx_str doc, const char* paths, const fbx_i64* path_lens, const fbx_i64* path_nsegs,
                             int npaths, fbx_i64* out) {
  int st[FBX_JSON_SCAN_PATHS];
  fbx_i64 vs[FBX_JSON_SCAN_PATHS], vl[FBX_JSON_SCAN_PATHS];
  const int width = 64 / npaths;
  int deep = 0;
  if (fbx_json_walk(doc.p, doc.n, paths, path_lens, path_nsegs, npaths, st, vs, vl))
    deep = fbx_json_bracket_depth(doc.p, doc.n) > FBX_JSON_MAX_DEPTH;
  fbx_u64 packed = 0;
  for (int k = 0; k < npaths; ++k) {
    fbx_u64 code = (fbx_u64)(deep ? FBX_JSON_TOO_DEEP : st[k]);
    if (!deep && st[k] == FBX_JSON_FOUND)
      code = vs[k] < ((fbx_i64)1 << (width - 3)) ? (fbx_u64)vs[k] << 3 : (fbx_u64)FBX_JSON_LOOK_AGAIN;
    packed |= code << (k * width);
  }
  *out = (fbx_i64)packed;
  return 1;
}

/* json_pick: the string json_scan's code `index` (of `group` codes) found; path / path_len /
 * nseg: that path, walked again only for a FBX_JSON_LOOK_AGAIN code. */
FBX_DEVICE fbx_i64 fbx_json_pick(fbx_str doc, fbx_i64 packed, int index, int group, const char* path,
                                 fbx_i64 path_len, fbx_i64 nseg, fbx_i8* status, char* out, fbx_i64* scratch) {
  const int width = 64 / group;
  fbx_u64 code = (fbx_u64)packed >> (index * width);
  if (width < 64) code &= ((fbx_u64)1 << width) - 1;
  const int st = (int)(code & 7);
  if (st == FBX_JSON_LOOK_AGAIN) return fbx_json_get(doc, path, path_len, nseg, status, out, scratch);
  if (status) *status = (fbx_i8)st;
  if (st != FBX_JSON_FOUND) return -1;
  return fbx_json_unescape_to_quote(doc.p + (code >> 3), out);
}

#endif /* FBX_OPS_JSON_H */
