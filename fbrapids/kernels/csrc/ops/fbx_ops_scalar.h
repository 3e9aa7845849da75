/* fbx_ops_scalar.h -- numeric, time and bucketing operators (one value in, one value out).
 * Null rule (all of them): a null input gives a null output; the host never calls them then. */
#ifndef FBX_OPS_SCALAR_H
#define FBX_OPS_SCALAR_H

#include "fbx_views.h"

/* floor(a / b) for b > 0, also for negative a (epoch seconds before 1970). */
FBX_DEVICE fbx_i64 fbx_floordiv(fbx_i64 a, fbx_i64 b) {
  fbx_i64 q = a / b;
  if ((a % b) != 0 && a < 0) q -= 1;
  return q;
}

/* Epoch seconds as (days since 1970-01-01, second of the day), without overflow over the
 * whole int64 and uint64 ranges (a uint64 above 2^63 is not read as a negative time). */
FBX_DEVICE fbx_i64 fbx_sod_i64(fbx_i64 ts) { fbx_i64 r = ts % 86400; return r < 0 ? r + 86400 : r; }
FBX_DEVICE fbx_i64 fbx_days_i64(fbx_i64 ts) { return ts / 86400 - (ts % 86400 < 0 ? 1 : 0); }
FBX_DEVICE fbx_i64 fbx_sod_u64(fbx_u64 ts) { return (fbx_i64)(ts % 86400u); }
FBX_DEVICE fbx_i64 fbx_days_u64(fbx_u64 ts) { return (fbx_i64)(ts / 86400u); }

/* Hour of the day (UTC, 0..23) from the second of the day. */
FBX_DEVICE fbx_i32 fbx_hour(fbx_i64 sod) { return (fbx_i32)(sod / 3600); }

/* Day of the week (UTC), Monday = 0, from days since 1970-01-01 (a Thursday, 3). */
FBX_DEVICE fbx_i32 fbx_weekday(fbx_i64 days) {
  fbx_i64 w = (days % 7 + 7 + 3) % 7;
  return (fbx_i32)w;
}

/* Day of the month (UTC, 1..31) from days since 1970-01-01: H. Hinnant's civil_from_days
 * (|days| < 2^63 / 146097 here: the days of any int64 / uint64 second). */
FBX_DEVICE fbx_i32 fbx_day(fbx_i64 days) {
  fbx_i64 z = days + 719468;
  fbx_i64 era = (z >= 0 ? z : z - 146096) / 146097;
  fbx_i64 doe = z - era * 146097;
  fbx_i64 yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  fbx_i64 doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  fbx_i64 mp = (5 * doy + 2) / 153;
  return (fbx_i32)(doy - (153 * mp + 2) / 5 + 1);
}

/* TensorFlow Bucketize: the number of boundaries b with b <= x (boundaries sorted). */
FBX_DEVICE fbx_i32 fbx_bucketize(double x, const double* bounds, fbx_i64 nb) {
  fbx_i64 lo = 0, hi = nb;
  while (lo < hi) {
    fbx_i64 mid = (lo + hi) >> 1;
    if (bounds[mid] <= x) lo = mid + 1; else hi = mid;
  }
  return (fbx_i32)lo;
}

/* bucketize of an integer column, exact: `always` boundaries lie at or below the type's
 * minimum; `bounds` are the other integer thresholds ceil(b) inside the type, sorted. */
#define FBX_BUCKETIZE_INT(NAME, T)                                                  \
  FBX_DEVICE fbx_i32 NAME(T x, const T* bounds, fbx_i64 nb, fbx_i64 always) {       \
    fbx_i64 lo = 0, hi = nb;                                                        \
    while (lo < hi) {                                                               \
      fbx_i64 mid = (lo + hi) >> 1;                                                 \
      if (bounds[mid] <= x) lo = mid + 1; else hi = mid;                            \
    }                                                                               \
    return (fbx_i32)(always + lo);                                                  \
  }
FBX_BUCKETIZE_INT(fbx_bucketize_i64, fbx_i64)
FBX_BUCKETIZE_INT(fbx_bucketize_u64, fbx_u64)

#endif /* FBX_OPS_SCALAR_H */
