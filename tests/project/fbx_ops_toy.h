/* fbx_ops_toy.h -- the toy operator of tests/project/toy_operator.py: x mod m with the sign
 * of m (Python's %), for int64 x and m >= 1.  Null rule: a null input gives a null output. */
#ifndef FBX_OPS_TOY_H
#define FBX_OPS_TOY_H

#include "fbx_views.h"

FBX_DEVICE fbx_i64 fbx_toy_mod(fbx_i64 x, fbx_i64 m) {
  fbx_i64 r = x % m;
  return r < 0 ? r + m : r;
}

#endif
