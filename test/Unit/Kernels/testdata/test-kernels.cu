// The kernels.ptx of the test bundles: `.entry NAME` with one parameter per
// argument of docs/bundle.md; unit u = unit_begin + global thread index.
#include "test-kernels.h"

#define UNIT(u)                                                                \
  int64_t u = unit_begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;     \
  if (u >= unit_end)                                                           \
    return;

extern "C" __global__ void disc_k0(CAC_COMMON_PARAMS, const float *x,
                                   const float *bonus, float *ret,
                                   float *total, int32_t *seg_start,
                                   float gamma) {
  UNIT(b)
  disc_unit_f32(b, seq_offsets, x, bonus, ret, total, seg_start, gamma);
}

extern "C" __global__ void disc64_k0(CAC_COMMON_PARAMS, const double *x,
                                     const double *bonus, double *ret,
                                     double *total, int32_t *seg_start,
                                     double gamma) {
  UNIT(b)
  disc_unit_f64(b, seq_offsets, x, bonus, ret, total, seg_start, gamma);
}

extern "C" __global__ void gmean_k0(CAC_COMMON_PARAMS, const float *reward,
                                    float *adv, float *gsize, float *mean,
                                    float scale) {
  UNIT(g)
  gmean_unit0(g, group_offsets, group_members, reward, gsize, mean);
}

extern "C" __global__ void gmean_k1(CAC_COMMON_PARAMS, const float *reward,
                                    float *adv, float *gsize, float *mean,
                                    float scale) {
  UNIT(b)
  gmean_unit1(b, seq_group, reward, mean, adv, scale);
}

extern "C" __global__ void tree_k0(CAC_COMMON_PARAMS, const float *w,
                                   float *nsum, float *tdepth, float *depth) {
  UNIT(k)
  tree_unit0(k, num_tokens, node_parent, token_node, w, nsum, depth);
}

extern "C" __global__ void tree_k1(CAC_COMMON_PARAMS, const float *w,
                                   float *nsum, float *tdepth, float *depth) {
  UNIT(b)
  tree_unit1(b, seq_offsets, token_node, w, depth, tdepth);
}

extern "C" __global__ void units_k0(CAC_COMMON_PARAMS, float *out) {
  UNIT(u)
  out[u] += 1.0f;
}
