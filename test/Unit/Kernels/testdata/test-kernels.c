/* The host.so of the test bundles: `void NAME(void **params)` entry points
 * with the exact ABI of docs/bundle.md, running units [params[0], params[1]).
 *
 * Argument indices: 0..5 the i64 head, 6..11 the structure arrays, then the
 * buffers in manifest order, then the parameters. */
#include "test-kernels.h"

#define ARG(i, T) (*(T *)params[i])
#define UNIT_LOOP(u) for (int64_t u = ARG(0, int64_t); u < ARG(1, int64_t); ++u)

/* disc: x (token in), bonus (seq in), ret (token out), total (seq out),
 * _seg_start (token out, i32); gamma. */
void disc_k0(void **params) {
  UNIT_LOOP(b)
  disc_unit_f32(b, ARG(6, const int32_t *), ARG(12, const float *),
                ARG(13, const float *), ARG(14, float *), ARG(15, float *),
                ARG(16, int32_t *), ARG(17, float));
}

void disc64_k0(void **params) {
  UNIT_LOOP(b)
  disc_unit_f64(b, ARG(6, const int32_t *), ARG(12, const double *),
                ARG(13, const double *), ARG(14, double *), ARG(15, double *),
                ARG(16, int32_t *), ARG(17, double));
}

/* gmean: reward (seq in), adv (seq out), gsize (group out),
 * _mean (group scratch); scale. */
void gmean_k0(void **params) {
  UNIT_LOOP(g)
  gmean_unit0(g, ARG(8, const int32_t *), ARG(9, const int32_t *),
              ARG(12, const float *), ARG(14, float *), ARG(15, float *));
}

void gmean_k1(void **params) {
  UNIT_LOOP(b)
  gmean_unit1(b, ARG(7, const int32_t *), ARG(12, const float *),
              ARG(15, const float *), ARG(13, float *), ARG(16, float));
}

/* tree: w (token in), nsum (node out), tdepth (token out),
 * _depth (node scratch); no parameters. */
void tree_k0(void **params) {
  UNIT_LOOP(k)
  tree_unit0(k, ARG(4, int64_t), ARG(10, const int32_t *),
             ARG(11, const int32_t *), ARG(12, const float *),
             ARG(13, float *), ARG(15, float *));
}

void tree_k1(void **params) {
  UNIT_LOOP(b)
  tree_unit1(b, ARG(6, const int32_t *), ARG(11, const int32_t *),
             ARG(12, const float *), ARG(15, const float *), ARG(14, float *));
}

/* units: out[u] += 1 for each unit u (checks that threads cover each unit
 * exactly once); out (seq out, f32). */
void units_k0(void **params) {
  float *out = ARG(12, float *);
  UNIT_LOOP(u)
  out[u] += 1.0f;
}
