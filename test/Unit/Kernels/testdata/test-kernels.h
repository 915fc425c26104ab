/* Per-unit bodies of the test kernels, shared by the host (C) and the CUDA
 * (PTX) builds so that both compute exactly the same thing. They stand in for
 * what `cac compile` emits until the compiler exists; see bundle-test.cpp for
 * the manifests that describe them. */
#ifndef CAC_TEST_KERNELS_H
#define CAC_TEST_KERNELS_H

#include <stdint.h>

#ifdef __CUDACC__
#define CAC_UNIT static __device__ __forceinline__
#else
#define CAC_UNIT static inline
#endif

/* The fixed head of every argument list (docs/bundle.md). */
#define CAC_COMMON_PARAMS                                                      \
  int64_t unit_begin, int64_t unit_end, int64_t num_seqs, int64_t num_groups,  \
      int64_t num_tokens, int64_t num_nodes, const int32_t *seq_offsets,       \
      const int32_t *seq_group, const int32_t *group_offsets,                  \
      const int32_t *group_members, const int32_t *node_parent,                \
      const int32_t *token_node

/* disc: ret[t] = x[t] + gamma * ret[t+1], ret[end] = bonus[b];
 * total[b] = ret[first]; seg_start[t] = 1 at each sequence's first token. */
#define CAC_DEFINE_DISC_UNIT(NAME, T)                                          \
  CAC_UNIT void NAME(int64_t b, const int32_t *seq_offsets, const T *x,        \
                     const T *bonus, T *ret, T *total, int32_t *seg_start,     \
                     T gamma) {                                                \
    int64_t begin = seq_offsets[b], end = seq_offsets[b + 1];                  \
    T acc = bonus[b];                                                          \
    for (int64_t t = end - 1; t >= begin; --t) {                               \
      acc = x[t] + gamma * acc;                                                \
      ret[t] = acc;                                                            \
      seg_start[t] = t == begin;                                               \
    }                                                                          \
    total[b] = acc;                                                            \
  }
CAC_DEFINE_DISC_UNIT(disc_unit_f32, float)
CAC_DEFINE_DISC_UNIT(disc_unit_f64, double)

/* gmean k0 (group): mean[g] and size[g] of the members' rewards. */
CAC_UNIT void gmean_unit0(int64_t g, const int32_t *group_offsets,
                          const int32_t *group_members, const float *reward,
                          float *gsize, float *mean) {
  int32_t begin = group_offsets[g], end = group_offsets[g + 1];
  float sum = 0.0f;
  for (int32_t i = begin; i < end; ++i)
    sum += reward[group_members[i]];
  gsize[g] = (float)(end - begin);
  mean[g] = end > begin ? sum / (float)(end - begin) : 0.0f;
}

/* gmean k1 (seq): adv[b] = scale * (reward[b] - mean[group of b]). */
CAC_UNIT void gmean_unit1(int64_t b, const int32_t *seq_group,
                          const float *reward, const float *mean, float *adv,
                          float scale) {
  adv[b] = scale * (reward[b] - mean[seq_group[b]]);
}

/* tree k0 (node): nsum[k] = sum of w over the tokens owned by k;
 * depth[k] = number of ancestors. */
CAC_UNIT void tree_unit0(int64_t k, int64_t num_tokens,
                         const int32_t *node_parent,
                         const int32_t *token_node, const float *w,
                         float *nsum, float *depth) {
  float s = 0.0f;
  for (int64_t i = 0; i < num_tokens; ++i)
    if (token_node[i] == k)
      s += w[i];
  nsum[k] = s;
  int32_t d = 0;
  for (int32_t n = node_parent[k]; n >= 0; n = node_parent[n])
    ++d;
  depth[k] = (float)d;
}

/* tree k1 (seq): tdepth[t] = depth[token_node[t]] + w[t]. */
CAC_UNIT void tree_unit1(int64_t b, const int32_t *seq_offsets,
                         const int32_t *token_node, const float *w,
                         const float *depth, float *tdepth) {
  for (int64_t t = seq_offsets[b]; t < seq_offsets[b + 1]; ++t)
    tdepth[t] = depth[token_node[t]] + w[t];
}

#endif /* CAC_TEST_KERNELS_H */
