/* fbx_device_helpers.cu -- device helpers around the CUDA meta-kernels (NVRTC, cupy.RawModule):
 * compaction of pool-resident variable-length results into cudf buffers, and packing of
 * the kernels' one-byte-per-row validity into cudf null masks (uint32 words, LSB first),
 * counting the nulls on the device.  Needs fbx_target.h (inlined ahead of this text). */

/* values[out_off[r] * elem ..] = pool[off[r] ..], cnt[r] elements of elem bytes. */
FBX_KERNEL void fbx_compact(fbx_i64 n, const char* pool, const fbx_i64* off, const fbx_i64* cnt,
                            fbx_i64 elem, const fbx_i64* out_off, char* values) {
  const fbx_i64 r = (fbx_i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= n) return;
  const fbx_i64 nb = cnt[r] * elem;
  char* dst = values + out_off[r] * elem;
  const char* src = pool + off[r];
  for (fbx_i64 i = 0; i < nb; ++i) dst[i] = src[i];
}

/* A list<str> result: string offsets (absolute into bytes, nstr + 1 of them) and bytes. */
FBX_KERNEL void fbx_compact_ls(fbx_i64 n, const char* pool, const fbx_i64* offa, const fbx_i64* cnta,
                               const fbx_i64* offb, const fbx_i64* cntb, const fbx_i64* loff,
                               const fbx_i64* boff, fbx_i64* soffs, char* bytes) {
  const fbx_i64 r = (fbx_i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (r == 0) soffs[0] = 0;
  if (r >= n) return;
  const fbx_i64* ends = (const fbx_i64*)(pool + offa[r]);
  for (fbx_i64 i = 0; i < cnta[r]; ++i) soffs[loff[r] + i + 1] = boff[r] + ends[i];
  for (fbx_i64 i = 0; i < cntb[r]; ++i) bytes[boff[r] + i] = pool[offb[r] + i];
}

/* One thread per 32 rows: mask word w holds rows 32w .. 32w+31 (bit b = row 32w+b, set =
 * valid); *nulls += the null rows (the caller zeroes it; it is read with the layer status). */
FBX_KERNEL void fbx_pack_validity(fbx_i64 n, const fbx_u8* valid, fbx_u32* mask, fbx_u64* nulls) {
  const fbx_i64 w = (fbx_i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (w * 32 >= n) return;
  fbx_u32 bits = 0;
  fbx_u64 missing = 0;
  for (int b = 0; b < 32; ++b) {
    const fbx_i64 r = w * 32 + b;
    if (r >= n) break;
    if (valid[r]) bits |= (fbx_u32)1 << b; else ++missing;
  }
  mask[w] = bits;
  if (missing) FBX_ATOMIC_ADD_U64(nulls, missing);
}
