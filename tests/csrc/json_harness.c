/* json_harness.c -- test shim exporting batch entry points over json_path.h, driven from
 * Python through ctypes.  Strings come as Arrow-style (offsets[n+1], bytes). */
#include "json_path.h"

/* JSON path extraction, two-phase like the pool: sizes first, then values.
 * out_offsets[n+1] is filled by the caller from the sizes of the first pass. */
void h_json_sizes(const char* data, const fbx_i64* offsets, fbx_i64 n, const char* path,
                  fbx_i64 path_len, fbx_i64* sizes, fbx_i32* status) {
  for (fbx_i64 i = 0; i < n; ++i) {
    int st = -1;
    sizes[i] = fbx_json_get_string(data + offsets[i], offsets[i + 1] - offsets[i], path,
                                   path_len, NULL, &st);
    status[i] = st;
  }
}

void h_json_values(const char* data, const fbx_i64* offsets, fbx_i64 n, const char* path,
                   fbx_i64 path_len, const fbx_i64* out_offsets, char* out, fbx_i32* status) {
  for (fbx_i64 i = 0; i < n; ++i) {
    int st = -1;
    fbx_json_get_string(data + offsets[i], offsets[i + 1] - offsets[i], path, path_len,
                        out + out_offsets[i], &st);
    status[i] = st;
  }
}
