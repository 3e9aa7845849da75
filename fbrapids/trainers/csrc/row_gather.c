/* row_gather.c -- rows gathered from several runs of host rows ("parts") into one, each row
 * copied once: output row i is row rows[i] of part parts[i].
 *
 *   fbx_gather_fixed:  fixed-width columns (width bytes a row: a dense matrix's row, a label, an id);
 *   fbx_gather_ragged: ncols ragged columns, int64 values and their offsets ([n + 1], int64, a
 *                      prefix sum of the gathered rows' lengths), in one pass.
 *
 * A ragged column of part p is offs[p * ncols + k] ([rows of p + 1], int64, absolute positions
 * in its values) and vals[p * ncols + k].  The caller checks that every part and row exists
 * (fbrapids/trainers/row_gather.py); nothing here reads past what the offsets say.
 * Single-threaded: the stream's producer thread runs it beside the trainer. */
#include <string.h>

/* ncols fixed-width columns of one width: src[p * ncols + k] is part p's column k, out[k] the
 * output's.  A row's columns are read together (independent loads: many misses in flight). */
FBX_KERNEL void fbx_gather_fixed(fbx_i64 n, const fbx_i64* parts, const fbx_i64* rows, fbx_i64 ncols, fbx_i64 width,
                                 const fbx_u8* const* src, fbx_u8* const* out) {
  if (width == 8) {
    for (fbx_i64 i = 0; i < n; ++i) {
      const fbx_u8* const* s = src + parts[i] * ncols;
      const fbx_i64 r = rows[i];
      for (fbx_i64 k = 0; k < ncols; ++k) ((fbx_i64*)out[k])[i] = ((const fbx_i64*)s[k])[r];
    }
  } else if (width == 4) {
    for (fbx_i64 i = 0; i < n; ++i) {
      const fbx_u8* const* s = src + parts[i] * ncols;
      const fbx_i64 r = rows[i];
      for (fbx_i64 k = 0; k < ncols; ++k) ((int*)out[k])[i] = ((const int*)s[k])[r];
    }
  } else {
    for (fbx_i64 i = 0; i < n; ++i) {
      const fbx_u8* const* s = src + parts[i] * ncols;
      const fbx_i64 r = rows[i];
      for (fbx_i64 k = 0; k < ncols; ++k) memcpy(out[k] + i * width, s[k] + r * width, (size_t)width);
    }
  }
}

/* One pass: the offsets and the values of each column, into value buffers of capacity[k]
 * values (at least the gathered rows' count: the parts' own count, say); returns the first
 * column whose capacity was short (the caller's bound was wrong), else -1.  The rows' offsets
 * are prefetched AHEAD rows ahead and their values half as far: a gather in random order is
 * bound by the memory's latency, not its bandwidth. */
#define FBX_GATHER_AHEAD 16
FBX_KERNEL fbx_i64 fbx_gather_ragged(fbx_i64 n, const fbx_i64* parts, const fbx_i64* rows, fbx_i64 ncols,
                                     const fbx_i64* const* offs, const fbx_i64* const* vals,
                                     const fbx_i64* capacity, fbx_i64* const* out_off, fbx_i64* const* out_vals) {
  for (fbx_i64 k = 0; k < ncols; ++k) {
    fbx_i64* o = out_off[k];
    fbx_i64* out = out_vals[k];
    fbx_i64 at = 0;
    o[0] = 0;
    for (fbx_i64 i = 0; i < n; ++i) {
      if (i + FBX_GATHER_AHEAD < n) {
        const fbx_i64 j = i + FBX_GATHER_AHEAD;
        __builtin_prefetch(offs[parts[j] * ncols + k] + rows[j]);
      }
      if (i + FBX_GATHER_AHEAD / 2 < n) {
        const fbx_i64 j = i + FBX_GATHER_AHEAD / 2, q = parts[j] * ncols + k;
        __builtin_prefetch(vals[q] + offs[q][rows[j]]);
      }
      const fbx_i64 p = parts[i] * ncols + k, r = rows[i];
      const fbx_i64 start = offs[p][r], len = offs[p][r + 1] - start;
      if (at + len > capacity[k]) return k;
      const fbx_i64* in = vals[p] + start;
      fbx_i64* to = out + at;
      for (fbx_i64 j = 0; j < len; ++j) to[j] = in[j];
      at += len;
      o[i + 1] = at;
    }
  }
  return -1;
}
