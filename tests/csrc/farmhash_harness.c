/* farmhash_harness.c -- test shim exporting batch entry points over farmhash.h,
 * so the tests can drive them from Python through ctypes.  Strings come as Arrow-style
 * (offsets[n+1], bytes). */
#include "farmhash.h"

void h_fp64(const char* data, const fbx_i64* offsets, fbx_i64 n, fbx_u64* out) {
  for (fbx_i64 i = 0; i < n; ++i)
    out[i] = fbx_fp64(data + offsets[i], offsets[i + 1] - offsets[i]);
}

void h_hash_bucket(const char* data, const fbx_i64* offsets, fbx_i64 n, fbx_i64 buckets,
                   fbx_i64* out) {
  for (fbx_i64 i = 0; i < n; ++i)
    out[i] = fbx_hash_bucket(fbx_fp64(data + offsets[i], offsets[i + 1] - offsets[i]), buckets);
}

/* Fingerprint of each int64's decimal text. */
void h_fp64_i64(const fbx_i64* vals, fbx_i64 n, fbx_u64* out) {
  for (fbx_i64 i = 0; i < n; ++i) out[i] = fbx_fp64_i64(vals[i]);
}

/* Decimal text of each int64 into out (stride 24); lengths into lens. */
void h_i64_to_dec(const fbx_i64* vals, fbx_i64 n, char* out, fbx_i32* lens) {
  for (fbx_i64 i = 0; i < n; ++i) lens[i] = fbx_i64_to_dec(vals[i], out + 24 * i);
}

void h_u64_to_dec(const fbx_u64* vals, fbx_i64 n, char* out, fbx_i32* lens) {
  for (fbx_i64 i = 0; i < n; ++i) lens[i] = fbx_u64_to_dec(vals[i], out + 24 * i);
}


/* Fingerprint of each string fed to the streaming hasher in pieces of `piece` bytes. */
void h_fp64_pieces(const char* data, const fbx_i64* offsets, fbx_i64 n, fbx_i64 piece, fbx_u64* out) {
  for (fbx_i64 i = 0; i < n; ++i) {
    fbx_fps h;
    const fbx_i64 len = offsets[i + 1] - offsets[i];
    fbx_fps_init(&h, (fbx_u64)len);
    for (fbx_i64 at = 0; at < len; at += piece)
      fbx_fps_put(&h, data + offsets[i] + at, len - at < piece ? len - at : piece);
    out[i] = fbx_fps_done(&h);
  }
}
