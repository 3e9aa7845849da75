#pragma GCC diagnostic ignored "-Wpsabi"
/* DLRM's dot interactions of a trial's arms, forward and backward, in C
 * (fbrapids/trainers/modules/arms_dots.py).
 *
 * A sample is (arm a, row b).  Its fields are T = [x[a][b], bags[a][b][0 .. nf), bias[a]]
 * (n = 1 + nf + has_bias rows of d floats, read where they lie: no concatenation), and its
 * output row out[a][b] is x[a][b] followed by the pairwise dots T_i . T_j in DLRM's order
 * (i = 1 .. n - 1, j = 0 .. i - 1; j = i too with self-interaction).  Each dot is summed over
 * the columns in order from zero; the backward gives dT_i = sum over pairs of g_ij T_j (2 g_ii
 * T_i on the diagonal), pairs in that order.  The samples are split over the threads; every
 * sum's order is the same for any thread count.
 *
 * The per-sample loops are compiled for AVX-512, AVX2 and the baseline (gcc's
 * target_clones on x86-64: the loader picks the machine's best); their arithmetic is the
 * same for each (no fused multiply-add: -ffp-contract=off on the clones).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FBX_DOTS_MAXN 128 /* fields */
#define FBX_DOTS_MAXD 256 /* columns */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FBX_CLONES __attribute__((target_clones("avx512f", "avx2", "default"), optimize("fp-contract=off")))
#else
#define FBX_CLONES
#endif

typedef struct {
    const float *x, *bags, *bias;
    int64_t nb, nf, d, n, self_inter, width;
    float *out;                                    /* the forward's */
    const float *grad;                             /* the backward's */
    float *grad_x, *grad_bags, *grad_bias_rows;
} fbx_dots_shape;

static inline const float *fbx_dots_field(const fbx_dots_shape *s, int64_t a, int64_t b, int64_t i) {
    if (i == 0) return s->x + (a * s->nb + b) * s->d;
    if (i <= s->nf) return s->bags + ((a * s->nb + b) * s->nf + (i - 1)) * s->d;
    return s->bias + a * s->d;
}

#define FBX_DOTS_LANES 16 /* samples side by side: each loop below runs across them */

/* the fields of samples [s0, s1) (at most FBX_DOTS_LANES) lane by lane: f[(i * d + c) * LANES + lane];
 * lanes past s1 are 0 */
static inline void fbx_dots_gather(const fbx_dots_shape *s, int64_t s0, int64_t s1, float *f) {
    const int64_t n = s->n, d = s->d;
    if (s1 - s0 < FBX_DOTS_LANES) memset(f, 0, sizeof(float) * (size_t)(n * d * FBX_DOTS_LANES));
    for (int64_t smp = s0; smp < s1; smp++) {
        const int64_t a = smp / s->nb, b = smp % s->nb, lane = smp - s0;
        for (int64_t i = 0; i < n; i++) {
            const float *t = fbx_dots_field(s, a, b, i);
            for (int64_t c = 0; c < d; c++) f[(i * d + c) * FBX_DOTS_LANES + lane] = t[c];
        }
    }
}

/* sixteen floats as one value (gcc / clang vector extension): element-wise arithmetic, one
 * lane per sample; loads and stores through memcpy (any alignment) */
typedef float fbx_v16 __attribute__((vector_size(64)));
static inline fbx_v16 fbx_ld16(const float *p) { fbx_v16 v; memcpy(&v, p, sizeof v); return v; }
static inline void fbx_st16(float *p, fbx_v16 v) { memcpy(p, &v, sizeof v); }

/* the loops below for the column count d known to the compiler where it is a common one */
#define FBX_DOTS_BY_DIM(d, CALL) \
    switch (d) { \
        case 8: CALL(8); break; \
        case 16: CALL(16); break; \
        case 32: CALL(32); break; \
        default: CALL(d); \
    }

static inline __attribute__((always_inline)) void fbx_dots_lanes_body(const fbx_dots_shape *s, int64_t s0, int64_t s1,
                                                                      float *out, const float *f, const int64_t d) {
    const int64_t n = s->n, off = s->self_inter ? 1 : 0;
    fbx_v16 fi[FBX_DOTS_MAXD];
    int64_t p = d;
    for (int64_t i = 1 - off; i < n; i++) {
        for (int64_t c = 0; c < d; c++) fi[c] = fbx_ld16(f + (i * d + c) * FBX_DOTS_LANES);
        for (int64_t j = 0; j < i + off; j++, p++) {
            const float *fj = f + j * d * FBX_DOTS_LANES;
            fbx_v16 acc = fi[0] * fbx_ld16(fj);
            for (int64_t c = 1; c < d; c++) acc += fi[c] * fbx_ld16(fj + c * FBX_DOTS_LANES);
            for (int64_t smp = s0; smp < s1; smp++) out[smp * s->width + p] = acc[smp - s0];
        }
    }
}

/* samples [s0, s1) (at most FBX_DOTS_LANES): their out rows (f: n * d * LANES floats of scratch) */
FBX_CLONES static void fbx_dots_lanes(const fbx_dots_shape *s, int64_t s0, int64_t s1, float *f) {
    const int64_t d = s->d;
    float *out = s->out;
    fbx_dots_gather(s, s0, s1, f);
    for (int64_t smp = s0; smp < s1; smp++)
        memcpy(out + smp * s->width, fbx_dots_field(s, smp / s->nb, smp % s->nb, 0), sizeof(float) * (size_t)d);
#define FBX_DOTS_FWD(D) fbx_dots_lanes_body(s, s0, s1, out, f, D)
    FBX_DOTS_BY_DIM(d, FBX_DOTS_FWD)
#undef FBX_DOTS_FWD
}

static inline __attribute__((always_inline)) void fbx_dots_back_body(const fbx_dots_shape *s, int64_t s0, int64_t s1,
                                                                     const float *gx_rows, float *grad_x,
                                                                     float *grad_bags, float *grad_bias_rows,
                                                                     const float *f, const float *gs, const int64_t d) {
    const int64_t n = s->n;
    fbx_v16 acc[FBX_DOTS_MAXD];
    for (int64_t i = 0; i < n; i++) { /* dT_i = sum over j of Gs_ij T_j, j in order */
        for (int64_t c = 0; c < d; c++) acc[c] = (fbx_v16){0};
        for (int64_t j = 0; j < n; j++) {
            const fbx_v16 g = fbx_ld16(gs + (i * n + j) * FBX_DOTS_LANES);
            const float *fj = f + j * d * FBX_DOTS_LANES;
            for (int64_t c = 0; c < d; c++) acc[c] += g * fbx_ld16(fj + c * FBX_DOTS_LANES);
        }
        for (int64_t smp = s0; smp < s1; smp++) {
            const int64_t l = smp - s0;
            float *o;
            if (i == 0) {
                o = grad_x + smp * d;
                for (int64_t c = 0; c < d; c++) o[c] = gx_rows[smp * s->width + c] + acc[c][l];
                continue;
            }
            if (i <= s->nf) o = grad_bags + (smp * s->nf + (i - 1)) * d;
            else if (grad_bias_rows) o = grad_bias_rows + smp * d;
            else continue;
            for (int64_t c = 0; c < d; c++) o[c] = acc[c][l];
        }
    }
}

/* samples [s0, s1) (at most FBX_DOTS_LANES): the fields' gradients; grad_bias_rows one row per
 * sample (f: n * (d + n) * LANES floats of scratch) */
FBX_CLONES static void fbx_dots_back_lanes(const fbx_dots_shape *s, int64_t s0, int64_t s1, float *f) {
    const int64_t n = s->n, d = s->d, off = s->self_inter ? 1 : 0;
    const float *grad = s->grad;
    float *gs = f + n * d * FBX_DOTS_LANES; /* the symmetric gradient of T T^T, lane by lane: gs[(i * n + j) * LANES + l] */
    fbx_dots_gather(s, s0, s1, f);
    memset(gs, 0, sizeof(float) * (size_t)(n * n * FBX_DOTS_LANES));
    int64_t p = d;
    for (int64_t i = 1 - off; i < n; i++)
        for (int64_t j = 0; j < i + off; j++, p++)
            for (int64_t smp = s0; smp < s1; smp++) {
                const float g = grad[smp * s->width + p];
                if (j == i) { /* self-interaction: d(t_i . t_i) / d t_i = 2 t_i */
                    gs[(i * n + i) * FBX_DOTS_LANES + smp - s0] = 2.0f * g;
                } else {
                    gs[(i * n + j) * FBX_DOTS_LANES + smp - s0] = g;
                    gs[(j * n + i) * FBX_DOTS_LANES + smp - s0] = g;
                }
            }
#define FBX_DOTS_BACK(D) fbx_dots_back_body(s, s0, s1, grad, s->grad_x, s->grad_bags, s->grad_bias_rows, f, gs, D)
    FBX_DOTS_BY_DIM(d, FBX_DOTS_BACK)
#undef FBX_DOTS_BACK
}

static int fbx_dots_shape_of(fbx_dots_shape *s, const float *x, const float *bags, const float *bias, int64_t nb,
                             int64_t nf, int64_t d, int self_inter) {
    memset(s, 0, sizeof *s);
    s->x = x; s->bags = bags; s->bias = bias;
    s->nb = nb; s->nf = nf; s->d = d; s->self_inter = self_inter;
    s->n = 1 + nf + (bias ? 1 : 0);
    s->width = d + (s->n * (s->n - 1)) / 2 + (self_inter ? s->n : 0);
    return d > 0 && d <= FBX_DOTS_MAXD && s->n <= FBX_DOTS_MAXN;
}

/* The m * nb samples in blocks of FBX_DOTS_LANES over the threads, each thread with its own
 * scratch: the forward's blocks, or the backward's.  0, or -2 when a scratch could not be had. */
static int fbx_dots_run(const fbx_dots_shape *s, int64_t m, int backward, int nthreads) {
    const int64_t total = m * s->nb, blocks = (total + FBX_DOTS_LANES - 1) / FBX_DOTS_LANES;
    const size_t scratch = sizeof(float) * (size_t)(s->n * (s->d + (backward ? s->n : 0)) * FBX_DOTS_LANES);
    int failed = 0;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1 && blocks > 1)
    {
        float *f = malloc(scratch);
        if (!f) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t k = 0; k < blocks; k++) {
            const int64_t s0 = k * FBX_DOTS_LANES, s1 = s0 + FBX_DOTS_LANES < total ? s0 + FBX_DOTS_LANES : total;
            if (f && backward) fbx_dots_back_lanes(s, s0, s1, f);
            else if (f) fbx_dots_lanes(s, s0, s1, f);
        }
        free(f);
    }
    return failed ? -2 : 0;
}

/* out [m][nb][width]: x then the dots.  Returns 0, -1 (nothing done) for more fields or
 * columns than FBX_DOTS_MAXN / FBX_DOTS_MAXD, or -2 when its scratch could not be allocated. */
int fbx_arms_dots(const float *x, const float *bags, const float *bias, int64_t m, int64_t nb, int64_t nf, int64_t d,
                  int self_inter, float *out, int nthreads) {
    fbx_dots_shape s;
    if (!fbx_dots_shape_of(&s, x, bags, bias, nb, nf, d, self_inter)) return -1;
    s.out = out;
    return fbx_dots_run(&s, m, 0, nthreads);
}

/* The backward of fbx_arms_dots given grad [m][nb][width]: grad_x [m][nb][d], grad_bags
 * [m][nb][nf][d] and (with a bias) grad_bias_rows [m][nb][d], each sample's part of its arm's
 * bias gradient.  Returns 0, or -1 / -2 as fbx_arms_dots. */
int fbx_arms_dots_backward(const float *x, const float *bags, const float *bias, int64_t m, int64_t nb, int64_t nf,
                           int64_t d, int self_inter, const float *grad, float *grad_x, float *grad_bags,
                           float *grad_bias_rows, int nthreads) {
    fbx_dots_shape s;
    if (!fbx_dots_shape_of(&s, x, bags, bias, nb, nf, d, self_inter)) return -1;
    s.grad = grad; s.grad_x = grad_x; s.grad_bags = grad_bags; s.grad_bias_rows = grad_bias_rows;
    return fbx_dots_run(&s, m, 1, nthreads);
}
