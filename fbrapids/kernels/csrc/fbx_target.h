/* fbx_target.h -- the small per-target macro header shared by every operator's device
 * functions.  The same operator text compiles as CUDA (NVRTC, cupy.RawModule) and as
 * host C (gcc -fopenmp, loaded with ctypes); only this header differs by target.
 *
 * Rules for device-function text:
 *   - use the fixed-width typedefs below (NVRTC has no <stdint.h>);
 *   - declare helpers with FBX_DEVICE, never `static`/`__device__` directly;
 *   - no libc calls other than the FBX_* wrappers (memcpy, log1p, atomics);
 *   - pure functions of their arguments: no globals, no malloc.
 */
#ifndef FBX_TARGET_H
#define FBX_TARGET_H

typedef signed char        fbx_i8;
typedef unsigned char      fbx_u8;
typedef short              fbx_i16;
typedef int                fbx_i32;
typedef unsigned int       fbx_u32;
typedef long long          fbx_i64;
typedef unsigned long long fbx_u64;

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  #define FBX_CUDA 1
  #define FBX_DEVICE static __device__ __forceinline__
  #define FBX_KERNEL extern "C" __global__
  #define FBX_LOG1P(x) log1p(x)
  #define FBX_ATOMIC_ADD_U64(p, v) atomicAdd((unsigned long long*)(p), (unsigned long long)(v))
  #define FBX_ATOMIC_OR_I32(p, v) atomicOr((int*)(p), (int)(v))
  #define FBX_ATOMIC_MAX_U64(p, v) atomicMax((unsigned long long*)(p), (unsigned long long)(v))
  #ifndef NULL
    #define NULL 0
  #endif
#else
  #define FBX_CUDA 0
  #include <math.h>
  #include <stddef.h>
  #define FBX_DEVICE static inline
  #define FBX_KERNEL
  #define FBX_LOG1P(x) log1p(x)
  #define FBX_ATOMIC_ADD_U64(p, v) __atomic_fetch_add((fbx_u64*)(p), (fbx_u64)(v), __ATOMIC_RELAXED)
  #define FBX_ATOMIC_OR_I32(p, v) __atomic_fetch_or((fbx_i32*)(p), (fbx_i32)(v), __ATOMIC_RELAXED)
  #define FBX_ATOMIC_MAX_U64(p, v) do { fbx_u64 _o = __atomic_load_n((fbx_u64*)(p), __ATOMIC_RELAXED); \
      while (_o < (fbx_u64)(v) && !__atomic_compare_exchange_n((fbx_u64*)(p), &_o, (fbx_u64)(v), 0, \
             __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} } while (0)
#endif

FBX_DEVICE void fbx_memcpy(char* dst, const char* src, fbx_i64 n) {
  for (fbx_i64 i = 0; i < n; ++i) dst[i] = src[i];
}

FBX_DEVICE int fbx_valid(const fbx_u8* bitmap, fbx_i64 row) {
  return bitmap == NULL || ((bitmap[row >> 3] >> (row & 7)) & 1);
}

#endif /* FBX_TARGET_H */
