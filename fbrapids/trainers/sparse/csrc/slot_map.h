/* slot_map.h -- the cache tier's id -> cache-slot map: open addressing over a power-of-two
 * number of buckets, uint64 keys, int32 slots, linear probing.  One text for both targets
 * (fbx_target.h): NVRTC compiles it for the CUDA cache tier (cupy.RawModule), gcc for the
 * host tests of the same logic.
 *
 * Ids use the whole uint64 range (2**64 - 1 is a valid id), so the bucket state lives in
 * the slot column: FBX_SLOT_EMPTY (never used: a probe stops here) and FBX_SLOT_TOMB (an
 * evicted id: a probe walks past it, an insert may reuse it).  A bucket's key means
 * something only while its slot is >= 0.
 *
 * Concurrency contract (the caller keeps it): one launch either probes, or inserts, or
 * erases; the keys of one insert / erase launch are distinct; an inserted key is absent
 * from the map, an erased key present.  Inserts claim a bucket with a compare-and-swap on
 * its slot, so distinct keys never share one.  Every walk is bounded by the bucket count.
 */
#include "fbx_target.h"

#define FBX_SLOT_EMPTY (-1)
#define FBX_SLOT_TOMB (-2)

#if FBX_CUDA
  #define FBX_SLOT_EACH(i, n) for (fbx_i64 i = (fbx_i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
                                   i += (fbx_i64)blockDim.x * gridDim.x)
  #define FBX_CAS_I32(p, o, v) atomicCAS((int*)(p), (int)(o), (int)(v))
#else
  #define FBX_SLOT_EACH(i, n) for (fbx_i64 i = 0; i < (n); ++i)
  #define FBX_CAS_I32(p, o, v) __sync_val_compare_and_swap((fbx_i32*)(p), (fbx_i32)(o), (fbx_i32)(v))
#endif

/* the first bucket of key k (splitmix64's finaliser: ids with equal low bits spread) */
FBX_DEVICE fbx_u64 fbx_slot_bucket(fbx_u64 k, fbx_u64 mask) {
  k ^= k >> 30; k *= 0xbf58476d1ce4e5b9ULL;
  k ^= k >> 27; k *= 0x94d049bb133111ebULL;
  k ^= k >> 31;
  return k & mask;
}

/* the slot of key k, or -1 */
FBX_DEVICE fbx_i32 fbx_slot_find(const fbx_u64* keys, const fbx_i32* vals, fbx_u64 mask, fbx_u64 k) {
  fbx_u64 b = fbx_slot_bucket(k, mask);
  for (fbx_u64 n = 0; n <= mask; ++n, b = (b + 1) & mask) {
    fbx_i32 v = vals[b];
    if (v == FBX_SLOT_EMPTY) return -1;
    if (v >= 0 && keys[b] == k) return v;
  }
  return -1;
}

/* put (k, slot) in the first empty or tombstoned bucket of k's walk; 0 when the map is full */
FBX_DEVICE int fbx_slot_insert(fbx_u64* keys, fbx_i32* vals, fbx_u64 mask, fbx_u64 k, fbx_i32 slot) {
  fbx_u64 b = fbx_slot_bucket(k, mask);
  for (fbx_u64 n = 0; n <= mask; ++n, b = (b + 1) & mask) {
    fbx_i32 v = vals[b];
    if (v < 0 && FBX_CAS_I32(vals + b, v, slot) == v) {
      keys[b] = k;
      return 1;
    }
  }
  return 0;
}

/* tombstone key k's bucket; 0 when k is not in the map */
FBX_DEVICE int fbx_slot_erase(const fbx_u64* keys, fbx_i32* vals, fbx_u64 mask, fbx_u64 k) {
  fbx_u64 b = fbx_slot_bucket(k, mask);
  for (fbx_u64 n = 0; n <= mask; ++n, b = (b + 1) & mask) {
    fbx_i32 v = vals[b];
    if (v == FBX_SLOT_EMPTY) return 0;
    if (v >= 0 && keys[b] == k) { vals[b] = FBX_SLOT_TOMB; return 1; }
  }
  return 0;
}

/* out[i] = slot of q[i] or -1 */
FBX_KERNEL void fbx_slot_map_probe(const fbx_u64* keys, const fbx_i32* vals, fbx_u64 mask,
                                   const fbx_u64* q, fbx_i64 n, fbx_i64* out) {
  FBX_SLOT_EACH(i, n) out[i] = fbx_slot_find(keys, vals, mask, q[i]);
}

/* insert (q[i], slots[i]); failed[0] = 1 when one found no bucket */
FBX_KERNEL void fbx_slot_map_insert(fbx_u64* keys, fbx_i32* vals, fbx_u64 mask, const fbx_u64* q,
                                    const fbx_i64* slots, fbx_i64 n, fbx_i32* failed) {
  FBX_SLOT_EACH(i, n) if (!fbx_slot_insert(keys, vals, mask, q[i], (fbx_i32)slots[i])) failed[0] = 1;
}

/* tombstone q[i]; failed[0] = 1 when one was not in the map */
FBX_KERNEL void fbx_slot_map_erase(const fbx_u64* keys, fbx_i32* vals, fbx_u64 mask, const fbx_u64* q,
                                   fbx_i64 n, fbx_i32* failed) {
  FBX_SLOT_EACH(i, n) if (!fbx_slot_erase(keys, vals, mask, q[i])) failed[0] = 1;
}
