/* farmhash.h -- FarmHash Fingerprint64 and integer-to-decimal helpers, as device functions.
 *
 * fbx_fp64 computes farmhash's util::Fingerprint64 (the "na" variant of Hash64), the hash
 * TensorFlow's to_hash_bucket_fast and pyfarmhash.fingerprint64 use.  It is written from
 * the published algorithm for this project; it compiles both as host C (gcc -std=c11) and
 * as CUDA under NVRTC:
 *   - no <stdint.h>, no libc: only the fixed-width typedefs of fbx_target.h;
 *   - 64-bit little-endian words are assembled byte by byte (no unaligned pointer casts),
 *     so the result is the same on any host byte order and any alignment;
 *   - no recursion; every function is FBX_DEVICE.
 *
 * Example (host C):
 *   fbx_u64 h = fbx_fp64("hello", 5);             // 13009744463427800296
 *   char buf[24]; int n = fbx_i64_to_dec(-42, buf); // "-42", n == 3
 *   fbx_i64 b = fbx_hash_bucket(fbx_fp64(buf, n), 1048576);
 */
#ifndef FBX_FARMHASH_H
#define FBX_FARMHASH_H

#include "fbx_target.h"

#define FBX_FH_K0 0xc3a5c85c97cb3127ULL
#define FBX_FH_K1 0xb492b66fbe98f273ULL
#define FBX_FH_K2 0x9ae16a3b2f90404fULL

/* Little-endian 64-bit and 32-bit loads, one byte at a time. */
FBX_DEVICE fbx_u64 fbx_fh_load64(const char* p) {
  const fbx_u8* b = (const fbx_u8*)p;
  return ((fbx_u64)b[0]) | ((fbx_u64)b[1] << 8) | ((fbx_u64)b[2] << 16) |
         ((fbx_u64)b[3] << 24) | ((fbx_u64)b[4] << 32) | ((fbx_u64)b[5] << 40) |
         ((fbx_u64)b[6] << 48) | ((fbx_u64)b[7] << 56);
}

FBX_DEVICE fbx_u64 fbx_fh_load32(const char* p) {
  const fbx_u8* b = (const fbx_u8*)p;
  return ((fbx_u64)b[0]) | ((fbx_u64)b[1] << 8) | ((fbx_u64)b[2] << 16) |
         ((fbx_u64)b[3] << 24);
}

/* Rotate right; every shift used below is in 1..63. */
FBX_DEVICE fbx_u64 fbx_fh_rotr(fbx_u64 v, int s) {
  return (v >> s) | (v << (64 - s));
}

FBX_DEVICE fbx_u64 fbx_fh_shiftmix(fbx_u64 v) { return v ^ (v >> 47); }

/* Mix two words with a multiplier (farmhash HashLen16 with mul). */
FBX_DEVICE fbx_u64 fbx_fh_mix16(fbx_u64 u, fbx_u64 v, fbx_u64 mul) {
  fbx_u64 a = (u ^ v) * mul;
  a ^= (a >> 47);
  fbx_u64 b = (v ^ a) * mul;
  b ^= (b >> 47);
  return b * mul;
}

FBX_DEVICE fbx_u64 fbx_fh_len0to16(const char* s, fbx_u64 len) {
  if (len >= 8) {
    fbx_u64 mul = FBX_FH_K2 + len * 2;
    fbx_u64 a = fbx_fh_load64(s) + FBX_FH_K2;
    fbx_u64 b = fbx_fh_load64(s + len - 8);
    fbx_u64 c = fbx_fh_rotr(b, 37) * mul + a;
    fbx_u64 d = (fbx_fh_rotr(a, 25) + b) * mul;
    return fbx_fh_mix16(c, d, mul);
  }
  if (len >= 4) {
    fbx_u64 mul = FBX_FH_K2 + len * 2;
    fbx_u64 a = fbx_fh_load32(s);
    return fbx_fh_mix16(len + (a << 3), fbx_fh_load32(s + len - 4), mul);
  }
  if (len > 0) {
    fbx_u32 a = (fbx_u8)s[0];
    fbx_u32 b = (fbx_u8)s[len >> 1];
    fbx_u32 c = (fbx_u8)s[len - 1];
    fbx_u32 y = a + (b << 8);
    fbx_u32 z = (fbx_u32)len + (c << 2);
    return fbx_fh_shiftmix((fbx_u64)y * FBX_FH_K2 ^ (fbx_u64)z * FBX_FH_K0) * FBX_FH_K2;
  }
  return FBX_FH_K2;
}

FBX_DEVICE fbx_u64 fbx_fh_len17to32(const char* s, fbx_u64 len) {
  fbx_u64 mul = FBX_FH_K2 + len * 2;
  fbx_u64 a = fbx_fh_load64(s) * FBX_FH_K1;
  fbx_u64 b = fbx_fh_load64(s + 8);
  fbx_u64 c = fbx_fh_load64(s + len - 8) * mul;
  fbx_u64 d = fbx_fh_load64(s + len - 16) * FBX_FH_K2;
  return fbx_fh_mix16(fbx_fh_rotr(a + b, 43) + fbx_fh_rotr(c, 30) + d,
                      a + fbx_fh_rotr(b + FBX_FH_K2, 18) + c, mul);
}

FBX_DEVICE fbx_u64 fbx_fh_len33to64(const char* s, fbx_u64 len) {
  fbx_u64 mul = FBX_FH_K2 + len * 2;
  fbx_u64 a = fbx_fh_load64(s) * FBX_FH_K2;
  fbx_u64 b = fbx_fh_load64(s + 8);
  fbx_u64 c = fbx_fh_load64(s + len - 8) * mul;
  fbx_u64 d = fbx_fh_load64(s + len - 16) * FBX_FH_K2;
  fbx_u64 y = fbx_fh_rotr(a + b, 43) + fbx_fh_rotr(c, 30) + d;
  fbx_u64 z = fbx_fh_mix16(y, a + fbx_fh_rotr(b + FBX_FH_K2, 18) + c, mul);
  fbx_u64 e = fbx_fh_load64(s + 16) * mul;
  fbx_u64 f = fbx_fh_load64(s + 24);
  fbx_u64 g = (y + fbx_fh_load64(s + len - 32)) * mul;
  fbx_u64 h = (z + fbx_fh_load64(s + len - 24)) * mul;
  return fbx_fh_mix16(fbx_fh_rotr(e + f, 43) + fbx_fh_rotr(g, 30) + h,
                      e + fbx_fh_rotr(f + a, 18) + g, mul);
}

/* farmhash WeakHashLen32WithSeeds over the 32 bytes at s; result in (*r1, *r2). */
FBX_DEVICE void fbx_fh_weak32(const char* s, fbx_u64 a, fbx_u64 b, fbx_u64* r1, fbx_u64* r2) {
  fbx_u64 w = fbx_fh_load64(s);
  fbx_u64 x = fbx_fh_load64(s + 8);
  fbx_u64 y = fbx_fh_load64(s + 16);
  fbx_u64 z = fbx_fh_load64(s + 24);
  a += w;
  b = fbx_fh_rotr(b + a + z, 21);
  fbx_u64 c = a;
  a += x;
  a += y;
  b += fbx_fh_rotr(a, 44);
  *r1 = a + z;
  *r2 = b + c;
}

/* The running state of Fingerprint64 over keys longer than 64 bytes. */
typedef struct { fbx_u64 x, y, z, v1, v2, w1, w2; } fbx_fh_state;

/* The state before the first 64-byte block (s: the key's first bytes). */
FBX_DEVICE void fbx_fh_start(fbx_fh_state* h, const char* s) {
  const fbx_u64 seed = 81;
  h->y = seed * FBX_FH_K1 + 113;
  h->z = fbx_fh_shiftmix(h->y * FBX_FH_K2 + 113) * FBX_FH_K2;
  h->v1 = h->v2 = h->w1 = h->w2 = 0;
  h->x = seed * FBX_FH_K2 + fbx_fh_load64(s);
}

/* One 64-byte block of the main loop. */
FBX_DEVICE void fbx_fh_block(fbx_fh_state* h, const char* s) {
  h->x = fbx_fh_rotr(h->x + h->y + h->v1 + fbx_fh_load64(s + 8), 37) * FBX_FH_K1;
  h->y = fbx_fh_rotr(h->y + h->v2 + fbx_fh_load64(s + 48), 42) * FBX_FH_K1;
  h->x ^= h->w2;
  h->y += h->v1 + fbx_fh_load64(s + 40);
  h->z = fbx_fh_rotr(h->z + h->w1, 33) * FBX_FH_K1;
  fbx_fh_weak32(s, h->v2 * FBX_FH_K1, h->x + h->w1, &h->v1, &h->v2);
  fbx_fh_weak32(s + 32, h->z + h->w2, h->y + fbx_fh_load64(s + 16), &h->w1, &h->w2);
  fbx_u64 t = h->z; h->z = h->x; h->x = t;
}

/* The fingerprint from the state and the key's last 64 bytes (last64; len > 64). */
FBX_DEVICE fbx_u64 fbx_fh_finish(fbx_fh_state* h, const char* last64, fbx_u64 len) {
  fbx_u64 x = h->x, y = h->y, z = h->z, v1 = h->v1, v2 = h->v2, w1 = h->w1, w2 = h->w2;
  const char* s = last64;
  fbx_u64 mul = FBX_FH_K1 + ((z & 0xff) << 1);
  w1 += ((len - 1) & 63);
  v1 += w1;
  w1 += v1;
  x = fbx_fh_rotr(x + y + v1 + fbx_fh_load64(s + 8), 37) * mul;
  y = fbx_fh_rotr(y + v2 + fbx_fh_load64(s + 48), 42) * mul;
  x ^= w2 * 9;
  y += v1 * 9 + fbx_fh_load64(s + 40);
  z = fbx_fh_rotr(z + w1, 33) * mul;
  fbx_fh_weak32(s, v2 * mul, x + w1, &v1, &v2);
  fbx_fh_weak32(s + 32, z + w2, y + fbx_fh_load64(s + 16), &w1, &w2);
  { fbx_u64 t = z; z = x; x = t; }
  return fbx_fh_mix16(fbx_fh_mix16(v1, w1, mul) + fbx_fh_shiftmix(y) * FBX_FH_K0 + z,
                      fbx_fh_mix16(v2, w2, mul) + x, mul);
}

/* Fingerprint64 of the len bytes at s (len >= 0). */
FBX_DEVICE fbx_u64 fbx_fp64(const char* s, fbx_i64 slen) {
  fbx_u64 len = (fbx_u64)slen;
  if (len <= 16) return fbx_fh_len0to16(s, len);
  if (len <= 32) return fbx_fh_len17to32(s, len);
  if (len <= 64) return fbx_fh_len33to64(s, len);
  fbx_fh_state h;
  fbx_fh_start(&h, s);
  const char* end = s + ((len - 1) / 64) * 64;
  const char* last64 = end + ((len - 1) & 63) - 63;
  do {
    fbx_fh_block(&h, s);
    s += 64;
  } while (s != end);
  return fbx_fh_finish(&h, last64, len);
}

/* Fingerprint64 of a key fed in pieces, its total length known up front: the same value
 * as fbx_fp64 over the concatenation, in constant memory, so a key of any length hashes
 * (cross and n-gram keys too long for one buffer).  Usage: fbx_fps_init(&h, len);
 * fbx_fps_put(&h, piece, n) ...; fbx_fps_done(&h) once len bytes are in. */
typedef struct {
  fbx_fh_state st;
  fbx_u64 len, nblocks, done;
  int fill;       /* bytes of the current block, in buf[64 .. 64 + fill) */
  char buf[128];  /* buf[0 .. 64): the previous block (the last 64 bytes may reach into it) */
} fbx_fps;

FBX_DEVICE void fbx_fps_init(fbx_fps* h, fbx_u64 len) {
  h->len = len;
  h->nblocks = len > 64 ? (len - 1) / 64 : 0;  /* blocks of the main loop; the rest is the tail */
  h->done = 0;
  h->fill = 0;
}

FBX_DEVICE void fbx_fps_put(fbx_fps* h, const char* p, fbx_i64 n) {
  for (fbx_i64 i = 0; i < n; ++i) {
    if (h->fill == 64) {  /* a full block with more bytes after it: a main-loop block */
      if (h->done < h->nblocks) {
        if (h->done == 0) fbx_fh_start(&h->st, h->buf + 64);
        fbx_fh_block(&h->st, h->buf + 64);
        ++h->done;
      }
      fbx_memcpy(h->buf, h->buf + 64, 64);
      h->fill = 0;
    }
    h->buf[64 + h->fill++] = p[i];
  }
}

FBX_DEVICE fbx_u64 fbx_fps_done(fbx_fps* h) {
  if (h->len <= 64) return fbx_fp64(h->buf + 64, (fbx_i64)h->len);
  return fbx_fh_finish(&h->st, h->buf + h->fill, h->len);  /* the last 64 bytes end at 64 + fill */
}

/* Decimal text of an unsigned 64-bit integer into out (no terminator); returns the
 * length (1..20). */
#if FBX_CUDA
FBX_DEVICE int fbx_u64_to_dec(fbx_u64 v, char* out) {
  char tmp[20];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + (int)(v % 10));
    v /= 10;
  } while (v != 0);
  for (int i = 0; i < n; ++i) out[i] = tmp[n - 1 - i];
  return n;
}
#else
/* Host: count the digits first, then write two digits per step from the end, from a
 * table of the 100 digit pairs (64-bit divisions only while the value passes 32 bits).
 * Integer hashing is dominated by this rendering (about 2x faster than a digit at a
 * time, then reversed); the text is the same. */
static const char fbx_dec_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";

FBX_DEVICE int fbx_dec_len(fbx_u64 v) {
  int n = 1;
  for (;;) {
    if (v < 10) return n;
    if (v < 100) return n + 1;
    if (v < 1000) return n + 2;
    if (v < 10000) return n + 3;
    v /= 10000;
    n += 4;
  }
}

FBX_DEVICE int fbx_u64_to_dec(fbx_u64 v, char* out) {
  const int n = fbx_dec_len(v);
  int i = n;
  while (v > 0xffffffffULL) {
    const fbx_u32 q = (fbx_u32)(v % 100);
    v /= 100;
    i -= 2;
    out[i] = fbx_dec_pairs[2 * q];
    out[i + 1] = fbx_dec_pairs[2 * q + 1];
  }
  fbx_u32 w = (fbx_u32)v;
  while (w >= 100) {
    const fbx_u32 q = w % 100;
    w /= 100;
    i -= 2;
    out[i] = fbx_dec_pairs[2 * q];
    out[i + 1] = fbx_dec_pairs[2 * q + 1];
  }
  if (w >= 10) {
    out[0] = fbx_dec_pairs[2 * w];
    out[1] = fbx_dec_pairs[2 * w + 1];
  } else {
    out[0] = (char)('0' + (int)w);
  }
  return n;
}
#endif

/* Decimal text of a signed 64-bit integer ("-1", "42", INT64_MIN included) into out
 * (no terminator); returns the length (1..20). */
FBX_DEVICE int fbx_i64_to_dec(fbx_i64 v, char* out) {
  if (v < 0) {
    out[0] = '-';
    /* 0 - (u64)v is the magnitude, also for INT64_MIN. */
    return 1 + fbx_u64_to_dec((fbx_u64)0 - (fbx_u64)v, out + 1);
  }
  return fbx_u64_to_dec((fbx_u64)v, out);
}

/* TensorFlow to_hash_bucket_fast bucket of a fingerprint: fp mod buckets, as int64
 * (buckets > 0). */
FBX_DEVICE fbx_i64 fbx_hash_bucket(fbx_u64 fp, fbx_i64 buckets) {
  const fbx_u64 b = (fbx_u64)buckets;
  return (b & (b - 1)) == 0 ? (fbx_i64)(fp & (b - 1)) : (fbx_i64)(fp % b);  /* same value; no division for 2^k */
}

/* Convenience: fingerprint of an int64's decimal text. */
FBX_DEVICE fbx_u64 fbx_fp64_i64(fbx_i64 v) {
  char buf[24];
  int n = fbx_i64_to_dec(v, buf);
  return fbx_fp64(buf, n);
}

#endif /* FBX_FARMHASH_H */
