/* fbx_row_take.c -- take rows of a variable-width Arrow column (string / binary, or a list of
 * fixed-width values) in two passes that write the output once:
 *
 *   1. fbx_take_offsets{32,64}: the output offsets (exact, a prefix sum of the kept rows'
 *      lengths) and validity bitmap; returns the number of values, or -1 when it exceeds
 *      the offset type (the caller falls back);
 *   2. fbx_take_values{32,64}: the values, one memcpy per run of rows that are contiguous
 *      in the input (a sorted subset of rows copies long runs).
 *
 * A row index < 0 is a null (a join's miss); a null input row is a null of length 0.  With
 * a fill value (fill != NULL), both are that value instead (a fill of nulls is a take of
 * every row with a fill).
 * OpenMP over blocks of rows when there are many; a thread's block of rows is a multiple
 * of 8 rows, so its validity bytes are its own.  Compiled once per machine (cached). */
#include <string.h>
#include <omp.h>

#define FBX_TAKE_MIN_PARALLEL 65536
#define FBX_TAKE_MAX_THREADS 256

static inline int fbx_bit(const fbx_u8* bits, fbx_i64 i) { return (bits[i >> 3] >> (i & 7)) & 1; }
#define FBX_TAKE_MISS(row) ((row) < 0 || (in_valid && !fbx_bit(in_valid, valid_bit0 + (row))))

#define FBX_TAKE_OFFSETS(NAME, OFF_T, OFF_MAX)                                                          \
FBX_KERNEL fbx_i64 NAME(fbx_i64 n, const fbx_i64* rows, const OFF_T* in_off, const fbx_u8* in_valid,   \
                        fbx_i64 valid_bit0, fbx_i64 fill_len, OFF_T* out_off, fbx_u8* out_valid,       \
                        fbx_i64* null_count) {                                                          \
  fbx_i64 sums[FBX_TAKE_MAX_THREADS + 1], nulls[FBX_TAKE_MAX_THREADS];                                  \
  int overflow = 0;                                                                                     \
  int nt = n >= FBX_TAKE_MIN_PARALLEL ? omp_get_max_threads() : 1;                                      \
  if (nt > FBX_TAKE_MAX_THREADS) nt = FBX_TAKE_MAX_THREADS;                                             \
  sums[0] = 0;                                                                                          \
  _Pragma("omp parallel num_threads(nt)")                                                               \
  {                                                                                                     \
    const int t = omp_get_thread_num(), used = omp_get_num_threads();                                   \
    const fbx_i64 chunk = ((n + used - 1) / used + 7) & ~(fbx_i64)7;                                    \
    const fbx_i64 r0 = t * chunk < n ? t * chunk : n, r1 = r0 + chunk < n ? r0 + chunk : n;             \
    fbx_i64 s = 0, miss = 0;                                                                            \
    for (fbx_i64 r = r0; r < r1; ++r) {                                                                 \
      const fbx_i64 row = rows[r];                                                                      \
      if (FBX_TAKE_MISS(row)) { if (fill_len < 0) ++miss; else s += fill_len; continue; }               \
      s += (fbx_i64)(in_off[row + 1] - in_off[row]);                                                    \
    }                                                                                                   \
    sums[t + 1] = s;                                                                                    \
    nulls[t] = miss;                                                                                    \
    _Pragma("omp barrier")                                                                              \
    _Pragma("omp single")                                                                               \
    {                                                                                                   \
      for (int i = 0; i < used; ++i) sums[i + 1] += sums[i];                                            \
      overflow = sums[used] > (fbx_i64)(OFF_MAX);                                                       \
      *null_count = 0;                                                                                  \
      for (int i = 0; i < used; ++i) *null_count += nulls[i];                                           \
      nt = used;                                                                                        \
    }                                                                                                   \
    if (!overflow) {                                                                                    \
      fbx_i64 o = sums[t];                                                                              \
      fbx_u8 byte = 0;                                                                                  \
      for (fbx_i64 r = r0; r < r1; ++r) {                                                               \
        const fbx_i64 row = rows[r];                                                                    \
        out_off[r] = (OFF_T)o;                                                                          \
        if (!FBX_TAKE_MISS(row)) {                                                                      \
          o += (fbx_i64)(in_off[row + 1] - in_off[row]);                                                \
          byte |= (fbx_u8)(1u << (r & 7));                                                              \
        } else if (fill_len >= 0) {                                                                     \
          o += fill_len;                                                                                \
          byte |= (fbx_u8)(1u << (r & 7));                                                              \
        }                                                                                               \
        if ((r & 7) == 7 || r + 1 == r1) {                                                              \
          if (out_valid) out_valid[r >> 3] = byte;                                                      \
          byte = 0;                                                                                     \
        }                                                                                               \
      }                                                                                                 \
    }                                                                                                   \
  }                                                                                                     \
  if (overflow) return -1;                                                                              \
  out_off[n] = (OFF_T)sums[nt];                                                                         \
  return sums[nt];                                                                                      \
}

#define FBX_TAKE_VALUES(NAME, OFF_T)                                                                     \
FBX_KERNEL void NAME(fbx_i64 n, const fbx_i64* rows, const OFF_T* in_off, const fbx_u8* in_valid,       \
                     fbx_i64 valid_bit0, const char* in_values, fbx_i64 elem, const char* fill,         \
                     const OFF_T* out_off, char* out_values) {                                          \
  const fbx_i64 block = 8192, nblocks = (n + block - 1) / block;                                        \
  _Pragma("omp parallel for schedule(static)  if (n >= FBX_TAKE_MIN_PARALLEL)")                         \
  for (fbx_i64 b = 0; b < nblocks; ++b) {                                                               \
    const fbx_i64 r1 = (b + 1) * block < n ? (b + 1) * block : n;                                       \
    fbx_i64 r = b * block;                                                                              \
    while (r < r1) {                                                                                    \
      fbx_i64 len = (fbx_i64)(out_off[r + 1] - out_off[r]);                                             \
      if (len == 0) { ++r; continue; }                                                                  \
      if (fill && FBX_TAKE_MISS(rows[r])) {                                                             \
        memcpy(out_values + (fbx_i64)out_off[r] * elem, fill, (size_t)(len * elem));                    \
        ++r;                                                                                            \
        continue;                                                                                       \
      }                                                                                                 \
      const fbx_i64 dst = (fbx_i64)out_off[r], src = (fbx_i64)in_off[rows[r]];                          \
      fbx_i64 end = src + len;                                                                          \
      for (++r; r < r1; ++r) { /* extend while the next non-empty row starts where this run ends */     \
        const fbx_i64 l = (fbx_i64)(out_off[r + 1] - out_off[r]);                                       \
        if (l == 0) continue;                                                                           \
        if ((fill && FBX_TAKE_MISS(rows[r])) || (fbx_i64)in_off[rows[r]] != end) break;                 \
        end += l;                                                                                       \
      }                                                                                                 \
      memcpy(out_values + dst * elem, in_values + src * elem, (size_t)((end - src) * elem));            \
    }                                                                                                   \
  }                                                                                                     \
}

FBX_TAKE_OFFSETS(fbx_take_offsets32, fbx_i32, 2147483647LL)
FBX_TAKE_OFFSETS(fbx_take_offsets64, fbx_i64, 9223372036854775807LL)
FBX_TAKE_VALUES(fbx_take_values32, fbx_i32)
FBX_TAKE_VALUES(fbx_take_values64, fbx_i64)
