/* json_path.h -- strict RFC 8259 JSON validation plus dotted-path string extraction, as a
 * device function (host C and CUDA/NVRTC alike; iterative, no recursion, no libc).
 *
 *   fbx_i64 fbx_json_get_string(doc, n, path, path_len, out, status)
 *
 * Validates the WHOLE document (n bytes at doc; it need not be NUL-terminated) and, when it
 * is valid, looks up `path`, a sequence of object keys separated by '.' ("device.os").
 * Returns the byte length of the *unescaped* UTF-8 string value at the path and, when
 * out != NULL, writes those bytes to out (no terminator); otherwise returns -1.  It is
 * meant to be called twice by a pooled allocator: once with out == NULL to size, then with
 * room for the value.  *status (when status != NULL):
 *   0  found: the value at the path is a JSON string;
 *   1  malformed JSON (anything below not met) -- also when the path was found early and
 *      the document turns bad afterwards;
 *   2  the path does not exist (a key is missing, or an intermediate value is not an
 *      object, or the root is not an object);
 *   3  the value at the path exists but is not a string.
 *
 * The rules (RFC 8259; Python's json.loads, made strict, is the test oracle):
 *   - the input is exactly one JSON value with optional whitespace (space, \t, \n, \r)
 *     around it; anything after it is malformed; an empty input is malformed;
 *   - literals true / false / null only; numbers -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
 *     (so "01", "1.", ".5", "+1", "NaN", "Infinity" are malformed; big numbers are fine);
 *   - strings use double quotes; escapes \" \\ \/ \b \f \n \r \t \uXXXX only; \uXXXX
 *     surrogate pairs decode to one code point; a lone surrogate is malformed; raw bytes
 *     < 0x20 inside a string are malformed; raw bytes >= 0x80 must be well-formed UTF-8
 *     (no overlongs, no encoded surrogates, nothing above U+10FFFF);
 *   - no comments, no trailing commas, no single quotes, no BOM;
 *   - nesting depth is bounded by FBX_JSON_MAX_DEPTH (64) open arrays/objects; a deeper
 *     document is reported as malformed;
 *   - duplicate keys: the LAST occurrence wins (like Python's json.loads / JavaScript),
 *     at every level of the path: {"a":{"b":"x"},"a":5} with path a.b gives status 2;
 *   - keys are compared after unescaping ("dev\u0069ce" matches the key device);
 *   - a path of length 0 addresses the root value itself; otherwise it is split on every
 *     '.', so a key that contains '.' cannot be addressed, and "a..b" has an empty middle key.
 *
 * fbx_json_walk(doc, n, paths, path_lens, path_nsegs, npaths, result, val_start, val_len), underneath,
 * validates once and looks up several paths in the same pass (json_scan's one walk);
 * fbx_json_bracket_depth tells a too-deep malformed document from another.
 *
 * Example (host C):
 *   int st; char buf[64];
 *   const char* d = "{\"device\":{\"os\":\"ios\"}}";
 *   fbx_i64 len = fbx_json_get_string(d, 23, "device.os", 9, NULL, &st);  // 3, st == 0
 *   fbx_json_get_string(d, 23, "device.os", 9, buf, &st);                 // buf = "ios"
 */
#ifndef FBX_JSON_PATH_H
#define FBX_JSON_PATH_H

#include "fbx_target.h"

#define FBX_JSON_MAX_DEPTH 64
#define FBX_JSON_MAX_PATHS 16 /* paths one fbx_json_walk looks up at once */

#define FBX_JSON_FOUND 0
#define FBX_JSON_MALFORMED 1
#define FBX_JSON_MISSING 2
#define FBX_JSON_NOT_STRING 3
#define FBX_JSON_TOO_DEEP 4 /* malformed, and nested deeper than FBX_JSON_MAX_DEPTH (json ops only) */

FBX_DEVICE int fbx_json_is_ws(fbx_u8 c) {
  return c <= ' ' && (c == ' ' || c == '\t' || c == '\n' || c == '\r'); /* one test for most bytes */
}

FBX_DEVICE fbx_i64 fbx_json_skip_ws(const char* d, fbx_i64 i, fbx_i64 n) {
  while (i < n && fbx_json_is_ws((fbx_u8)d[i])) ++i;
  return i;
}

FBX_DEVICE int fbx_json_hex(fbx_u8 c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* The 4 hex digits at d[i..i+3] as a code unit, or -1. */
FBX_DEVICE int fbx_json_hex4(const char* d, fbx_i64 i, fbx_i64 n) {
  if (i + 4 > n) return -1;
  int v = 0;
  for (int k = 0; k < 4; ++k) {
    int h = fbx_json_hex((fbx_u8)d[i + k]);
    if (h < 0) return -1;
    v = (v << 4) | h;
  }
  return v;
}

/* Length of the well-formed UTF-8 sequence starting at d[i] (lead byte >= 0x80), or 0. */
FBX_DEVICE int fbx_json_utf8_len(const char* d, fbx_i64 i, fbx_i64 n) {
  fbx_u8 c = (fbx_u8)d[i];
  int len;
  fbx_u8 lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c == 0xE0) { len = 3; lo = 0xA0; }
  else if (c == 0xED) { len = 3; hi = 0x9F; }
  else if (c >= 0xE1 && c <= 0xEF) len = 3;
  else if (c == 0xF0) { len = 4; lo = 0x90; }
  else if (c >= 0xF1 && c <= 0xF3) len = 4;
  else if (c == 0xF4) { len = 4; hi = 0x8F; }
  else return 0;
  if (i + len > n) return 0;
  fbx_u8 c1 = (fbx_u8)d[i + 1];
  if (c1 < lo || c1 > hi) return 0;
  for (int k = 2; k < len; ++k) {
    fbx_u8 ck = (fbx_u8)d[i + k];
    if (ck < 0x80 || ck > 0xBF) return 0;
  }
  return len;
}

/* Validate the string whose opening quote is at d[i]; returns the index just past the
 * closing quote, or -1 when malformed. */
FBX_DEVICE fbx_i64 fbx_json_scan_string(const char* d, fbx_i64 i, fbx_i64 n) {
  ++i; /* opening quote */
  while (i < n) {
    fbx_u8 c = (fbx_u8)d[i];
    if ((fbx_u8)(c - 0x23) < 0x5D && c != '\\') { /* '#' .. DEL but the backslash: itself */
      ++i;
      continue;
    }
    if (c == '"') return i + 1;
    if (c < 0x20) return -1;
    if (c == '\\') {
      if (i + 1 >= n) return -1;
      fbx_u8 e = (fbx_u8)d[i + 1];
      if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
          e == 'r' || e == 't') {
        i += 2;
      } else if (e == 'u') {
        int u = fbx_json_hex4(d, i + 2, n);
        if (u < 0) return -1;
        i += 6;
        if (u >= 0xD800 && u <= 0xDBFF) {
          if (i + 1 >= n || d[i] != '\\' || d[i + 1] != 'u') return -1;
          int lo = fbx_json_hex4(d, i + 2, n);
          if (lo < 0xDC00 || lo > 0xDFFF) return -1;
          i += 6;
        } else if (u >= 0xDC00 && u <= 0xDFFF) {
          return -1; /* lone low surrogate */
        }
      } else {
        return -1;
      }
    } else if (c >= 0x80) {
      int len = fbx_json_utf8_len(d, i, n);
      if (len == 0) return -1;
      i += len;
    } else {
      ++i;
    }
  }
  return -1; /* unterminated */
}

/* Validate the number starting at d[i]; returns the index just past it, or -1. */
FBX_DEVICE fbx_i64 fbx_json_scan_number(const char* d, fbx_i64 i, fbx_i64 n) {
  if (i < n && d[i] == '-') ++i;
  if (i >= n) return -1;
  if (d[i] == '0') {
    ++i;
  } else if (d[i] >= '1' && d[i] <= '9') {
    while (i < n && d[i] >= '0' && d[i] <= '9') ++i;
  } else {
    return -1;
  }
  if (i < n && d[i] == '.') {
    ++i;
    if (i >= n || d[i] < '0' || d[i] > '9') return -1;
    while (i < n && d[i] >= '0' && d[i] <= '9') ++i;
  }
  if (i < n && (d[i] == 'e' || d[i] == 'E')) {
    ++i;
    if (i < n && (d[i] == '+' || d[i] == '-')) ++i;
    if (i >= n || d[i] < '0' || d[i] > '9') return -1;
    while (i < n && d[i] >= '0' && d[i] <= '9') ++i;
  }
  return i;
}

/* Index just past the literal `lit` (of length len) at d[i], or -1. */
FBX_DEVICE fbx_i64 fbx_json_scan_literal(const char* d, fbx_i64 i, fbx_i64 n,
                                         const char* lit, int len) {
  if (i + len > n) return -1;
  for (int k = 0; k < len; ++k)
    if (d[i + k] != lit[k]) return -1;
  return i + len;
}

/* Decode one unit of a validated string body at raw[*i] into buf (1-4 UTF-8 bytes);
 * advances *i; returns the number of bytes written. */
FBX_DEVICE int fbx_json_unit(const char* raw, fbx_i64* i, char* buf) {
  fbx_u8 c = (fbx_u8)raw[*i];
  if (c != '\\') {
    buf[0] = (char)c;
    *i += 1;
    return 1;
  }
  fbx_u8 e = (fbx_u8)raw[*i + 1];
  if (e != 'u') {
    char r = (char)e; /* \" \\ \/ */
    if (e == 'b') r = '\b';
    else if (e == 'f') r = '\f';
    else if (e == 'n') r = '\n';
    else if (e == 'r') r = '\r';
    else if (e == 't') r = '\t';
    buf[0] = r;
    *i += 2;
    return 1;
  }
  fbx_u32 cp = (fbx_u32)fbx_json_hex4(raw, *i + 2, *i + 6);
  *i += 6;
  if (cp >= 0xD800 && cp <= 0xDBFF) { /* validated: a low surrogate follows */
    fbx_u32 lo = (fbx_u32)fbx_json_hex4(raw, *i + 2, *i + 6);
    *i += 6;
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  }
  if (cp < 0x80) {
    buf[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    buf[0] = (char)(0xC0 | (cp >> 6));
    buf[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    buf[0] = (char)(0xE0 | (cp >> 12));
    buf[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    buf[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  buf[0] = (char)(0xF0 | (cp >> 18));
  buf[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  buf[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  buf[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Unescape a validated string body raw[0..n) into out (when out != NULL); returns the
 * unescaped length in bytes. */
FBX_DEVICE fbx_i64 fbx_json_unescape(const char* raw, fbx_i64 n, char* out) {
  fbx_i64 i = 0, len = 0;
  char buf[4];
  while (i < n) {
    int k = fbx_json_unit(raw, &i, buf);
    if (out != NULL)
      for (int j = 0; j < k; ++j) out[len + j] = buf[j];
    len += k;
  }
  return len;
}

/* Whether the validated string body raw[0..n), unescaped, equals key[0..key_len). */
FBX_DEVICE int fbx_json_key_equals(const char* raw, fbx_i64 n, const char* key,
                                   fbx_i64 key_len) {
  if (n < key_len) return 0; /* unescaping never lengthens a body */
  fbx_i64 i = 0, pos = 0;
  char buf[4];
  while (i < n) {
    if (raw[i] != '\\') { /* a byte that stands for itself */
      if (pos >= key_len || raw[i] != key[pos]) return 0;
      ++i;
      ++pos;
      continue;
    }
    int k = fbx_json_unit(raw, &i, buf);
    if (pos + k > key_len) return 0;
    for (int j = 0; j < k; ++j)
      if (buf[j] != key[pos + j]) return 0;
    pos += k;
  }
  return pos == key_len;
}

/* The '.'-separated segment of path after the one at [*start, *start + *len) (the first
 * one when first), in place. */
FBX_DEVICE void fbx_json_next_segment(const char* path, fbx_i64 path_len, int first, fbx_i64* start,
                                      fbx_i64* len) {
  fbx_i64 s = first ? 0 : *start + *len + 1, e = s;
  while (e < path_len && path[e] != '.') ++e;
  *start = s;
  *len = e - s;
}

/* The segment of path before the one starting at *start (> 0), in place. */
FBX_DEVICE void fbx_json_prev_segment(const char* path, fbx_i64* start, fbx_i64* len) {
  fbx_i64 e = *start - 1, s = e; /* path[e] is the '.' ending it */
  while (s > 0 && path[s - 1] != '.') --s;
  *start = s;
  *len = e - s;
}

/* Segments of a dotted path: 0 for the empty path (the root), else 1 + its dots. */
FBX_DEVICE fbx_i64 fbx_json_nsegments(const char* path, fbx_i64 path_len) {
  fbx_i64 nseg = path_len > 0;
  for (fbx_i64 j = 0; j < path_len; ++j) nseg += path[j] == '.';
  return nseg;
}

/* The walk behind fbx_json_get_string and the json ops: ONE pass over doc that validates
 * it and looks up npaths (<= FBX_JSON_MAX_PATHS) dotted paths at once.  Path k is
 * paths[o_k .. o_k + path_lens[k]), o_k the sum of the lengths before it (the paths
 * concatenated), and has path_nsegs[k] segments (fbx_json_nsegments).  Returns 1 when
 * doc is malformed (then every result[k] is FBX_JSON_MALFORMED), else 0 with result[k] the status of path k and, where it is
 * FBX_JSON_FOUND, val_start[k] / val_len[k] the raw string body's span (between the
 * quotes, still escaped). */
FBX_DEVICE int fbx_json_walk(const char* doc, fbx_i64 n, const char* paths, const fbx_i64* path_lens,
                             const fbx_i64* path_nsegs, int npaths, int* result, fbx_i64* val_start,
                             fbx_i64* val_len) {
  const char* path[FBX_JSON_MAX_PATHS];
  int nseg[FBX_JSON_MAX_PATHS];   /* path segments (0 for the empty path = the root) */
  int pm[FBX_JSON_MAX_PATHS];     /* containers 1..pm are the objects along path k */
  int pending[FBX_JSON_MAX_PATHS]; /* 1: next value is the target; 2: an intermediate */
  fbx_i64 seg_start[FBX_JSON_MAX_PATHS], seg_len[FBX_JSON_MAX_PATHS]; /* segment pm-1 */
  fbx_i64 o = 0;
  for (int k = 0; k < npaths; ++k) {
    path[k] = paths + o;
    o += path_lens[k];
    nseg[k] = (int)path_nsegs[k];
    pm[k] = 0;
    seg_start[k] = seg_len[k] = 0;
    pending[k] = nseg[k] == 0 ? 1 : 2;
    result[k] = FBX_JSON_MISSING;
    val_start[k] = val_len[k] = 0;
  }
  int any_pending = npaths > 0; /* some pending[k] is set */
  fbx_u64 is_obj = 0;  /* bit (depth-1): the open container at that depth is an object */
  int depth = 0;       /* open containers */
  int malformed = 0;

  /* States: 0 expect a value, 1 expect a key (or '}' when allow_close), 2 after a value. */
  int state = 0;
  int allow_close = 0;
  fbx_i64 i = fbx_json_skip_ws(doc, 0, n);
  for (;;) {
    if (state == 0) {
      if (i >= n) { malformed = 1; break; }
      char c = doc[i];
      if (c == '{' || c == '[') {
        if (depth >= FBX_JSON_MAX_DEPTH) { malformed = 1; break; }
        if (c == '{') is_obj |= ((fbx_u64)1 << depth);
        else is_obj &= ~((fbx_u64)1 << depth);
        ++depth;
        if (any_pending) {
          for (int k = 0; k < npaths; ++k) {
            if (pending[k] == 1) result[k] = FBX_JSON_NOT_STRING;
            else if (pending[k] == 2) {
              result[k] = FBX_JSON_MISSING;
              if (c == '{') { /* one level deeper along path k: its next segment */
                pm[k] = depth;
                fbx_json_next_segment(path[k], path_lens[k], pm[k] == 1, &seg_start[k], &seg_len[k]);
              }
            }
            pending[k] = 0;
          }
          any_pending = 0;
        }
        i = fbx_json_skip_ws(doc, i + 1, n);
        if (c == '{') { state = 1; allow_close = 1; }
        else if (i < n && doc[i] == ']') { --depth; ++i; state = 2; }
        else state = 0;
        continue;
      }
      fbx_i64 e;
      if (c == '"') e = fbx_json_scan_string(doc, i, n);
      else if (c == 't') e = fbx_json_scan_literal(doc, i, n, "true", 4);
      else if (c == 'f') e = fbx_json_scan_literal(doc, i, n, "false", 5);
      else if (c == 'n') e = fbx_json_scan_literal(doc, i, n, "null", 4);
      else if (c == '-' || (c >= '0' && c <= '9')) e = fbx_json_scan_number(doc, i, n);
      else e = -1;
      if (e < 0) { malformed = 1; break; }
      if (any_pending) {
        for (int k = 0; k < npaths; ++k) {
          if (pending[k] == 1) {
            if (c == '"') { result[k] = FBX_JSON_FOUND; val_start[k] = i + 1; val_len[k] = e - i - 2; }
            else result[k] = FBX_JSON_NOT_STRING;
          } else if (pending[k] == 2) {
            result[k] = FBX_JSON_MISSING;
          }
          pending[k] = 0;
        }
        any_pending = 0;
      }
      i = e;
      state = 2;
    } else if (state == 1) {
      if (i >= n) { malformed = 1; break; }
      if (doc[i] == '}' && allow_close) {
        for (int k = 0; k < npaths; ++k) {
          if (depth == pm[k]) {
            --pm[k];
            if (pm[k] > 0) fbx_json_prev_segment(path[k], &seg_start[k], &seg_len[k]);
          }
        }
        --depth;
        ++i;
        state = 2;
        continue;
      }
      if (doc[i] != '"') { malformed = 1; break; }
      fbx_i64 e = fbx_json_scan_string(doc, i, n);
      if (e < 0) { malformed = 1; break; }
      const char c0 = doc[i + 1]; /* a key's first byte: most keys differ there */
      for (int k = 0; k < npaths; ++k) {
        if (depth == pm[k] && (seg_len[k] == 0 || c0 == '\\' || c0 == path[k][seg_start[k]]) &&
            fbx_json_key_equals(doc + i + 1, e - i - 2, path[k] + seg_start[k], seg_len[k])) {
          pending[k] = (pm[k] == nseg[k]) ? 1 : 2;
          any_pending = 1;
        }
      }
      i = fbx_json_skip_ws(doc, e, n);
      if (i >= n || doc[i] != ':') { malformed = 1; break; }
      i = fbx_json_skip_ws(doc, i + 1, n);
      state = 0;
    } else { /* state == 2: after a value */
      i = fbx_json_skip_ws(doc, i, n);
      if (depth == 0) {
        if (i != n) malformed = 1;
        break;
      }
      if (i >= n) { malformed = 1; break; }
      char c = doc[i];
      int top_obj = (int)((is_obj >> (depth - 1)) & 1);
      if (c == ',') {
        i = fbx_json_skip_ws(doc, i + 1, n);
        if (top_obj) { state = 1; allow_close = 0; }
        else state = 0;
      } else if ((c == '}' && top_obj) || (c == ']' && !top_obj)) {
        for (int k = 0; k < npaths; ++k) {
          if (depth == pm[k]) {
            --pm[k];
            if (pm[k] > 0) fbx_json_prev_segment(path[k], &seg_start[k], &seg_len[k]);
          }
        }
        --depth;
        ++i;
      } else {
        malformed = 1;
        break;
      }
    }
  }
  if (malformed)
    for (int k = 0; k < npaths; ++k) result[k] = FBX_JSON_MALFORMED;
  return malformed;
}

FBX_DEVICE fbx_i64 fbx_json_get_string(const char* doc, fbx_i64 n, const char* path,
                                       fbx_i64 path_len, char* out, int* status) {
  int result;
  fbx_i64 val_start, val_len, nseg = fbx_json_nsegments(path, path_len);
  fbx_json_walk(doc, n, path, &path_len, &nseg, 1, &result, &val_start, &val_len);
  if (status != NULL) *status = result;
  if (result != FBX_JSON_FOUND) return -1;
  return fbx_json_unescape(doc + val_start, val_len, out);
}

/* The deepest nesting of '[' / '{' in doc, brackets inside strings not counted, on ANY
 * text (malformed too): json_fields.nesting_depth's definition, byte by byte (the bytes
 * it looks at are ASCII, so UTF-8 text gives the code-point answer). */
FBX_DEVICE fbx_i64 fbx_json_bracket_depth(const char* d, fbx_i64 n) {
  fbx_i64 depth = 0, deepest = 0;
  int in_str = 0, esc = 0;
  for (fbx_i64 i = 0; i < n; ++i) {
    char c = d[i];
    if (in_str) {
      if (esc) esc = 0;
      else if (c == '\\') esc = 1;
      else if (c == '"') in_str = 0;
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

/* Unescape the validated string body starting at raw[0] up to its closing quote into out
 * (when out != NULL); returns the unescaped length in bytes. */
FBX_DEVICE fbx_i64 fbx_json_unescape_to_quote(const char* raw, char* out) {
  fbx_i64 i = 0, len = 0;
  char buf[4];
  while (raw[i] != '"') {
    int k = fbx_json_unit(raw, &i, buf);
    if (out != NULL)
      for (int j = 0; j < k; ++j) out[len + j] = buf[j];
    len += k;
  }
  return len;
}

#endif /* FBX_JSON_PATH_H */
