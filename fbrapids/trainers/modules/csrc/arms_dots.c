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

/* sixteen floats as one value (gcc / clang vector extension): element-wise arithmetic, one
 * lane per sample; loads and stores through memcpy (any alignment) */
typedef float fbx_v16 __attribute__((vector_size(64)));
typedef int32_t fbx_dots_mask __attribute__((vector_size(64)));
static inline fbx_v16 fbx_ld16(const float *p) { fbx_v16 v; memcpy(&v, p, sizeof v); return v; }
static inline void fbx_st16(float *p, fbx_v16 v) { memcpy(p, &v, sizeof v); }

/* r[0 .. 16) as a 16 x 16 matrix, transposed in place: four rounds of two-vector shuffles, the
 * round on bit k swapping the elements whose row and column differ in bit k (no arithmetic) */
#define FBX_LO(k, c) (((c) & (k)) ? 16 + ((c) ^ (k)) : (c))
#define FBX_HI(k, c) (((c) & (k)) ? 16 + (c) : ((c) ^ (k)))
#define FBX_MASK(F, k) {F(k, 0), F(k, 1), F(k, 2), F(k, 3), F(k, 4), F(k, 5), F(k, 6), F(k, 7), \
                        F(k, 8), F(k, 9), F(k, 10), F(k, 11), F(k, 12), F(k, 13), F(k, 14), F(k, 15)}
#if defined(__clang__) /* clang's two-vector shuffle takes its indices as constants */
#define FBX_SHUFFLE(x0, x1, F, k) __builtin_shufflevector(x0, x1, F(k, 0), F(k, 1), F(k, 2), F(k, 3), F(k, 4), \
        F(k, 5), F(k, 6), F(k, 7), F(k, 8), F(k, 9), F(k, 10), F(k, 11), F(k, 12), F(k, 13), F(k, 14), F(k, 15))
#else
#define FBX_SHUFFLE(x0, x1, F, k) __builtin_shuffle(x0, x1, (fbx_dots_mask)FBX_MASK(F, k))
#endif
#define FBX_ROUND(k) do { \
        for (int q = 0; q < 16; q++) \
            if (!(q & (k))) { \
                const fbx_v16 x0 = r[q], x1 = r[q | (k)]; \
                r[q] = FBX_SHUFFLE(x0, x1, FBX_LO, k); \
                r[q | (k)] = FBX_SHUFFLE(x0, x1, FBX_HI, k); \
            } \
    } while (0)
static inline __attribute__((always_inline)) void fbx_transpose16(fbx_v16 *r) {
    FBX_ROUND(1);
    FBX_ROUND(2);
    FBX_ROUND(4);
    FBX_ROUND(8);
}

/* the fields of samples [s0, s1) (at most FBX_DOTS_LANES) lane by lane: f[(i * d + c) * LANES + lane];
 * lanes past s1 are 0.  Sixteen columns at a time through a transpose where d allows. */
static inline __attribute__((always_inline)) void fbx_dots_gather(const fbx_dots_shape *s, int64_t s0, int64_t s1,
                                                                  float *f) {
    const int64_t n = s->n, d = s->d, cnt = s1 - s0;
    if (d % 16 == 0) {
        fbx_v16 r[16];
        for (int64_t i = 0; i < n; i++)
            for (int64_t c0 = 0; c0 < d; c0 += 16) {
                for (int64_t l = 0; l < 16; l++)
                    r[l] = l < cnt ? fbx_ld16(fbx_dots_field(s, (s0 + l) / s->nb, (s0 + l) % s->nb, i) + c0)
                                   : (fbx_v16){0};
                fbx_transpose16(r);
                for (int64_t c = 0; c < 16; c++) fbx_st16(f + (i * d + c0 + c) * FBX_DOTS_LANES, r[c]);
            }
        return;
    }
    if (cnt < FBX_DOTS_LANES) memset(f, 0, sizeof(float) * (size_t)(n * d * FBX_DOTS_LANES));
    for (int64_t smp = s0; smp < s1; smp++) {
        const int64_t a = smp / s->nb, b = smp % s->nb, lane = smp - s0;
        for (int64_t i = 0; i < n; i++) {
            const float *t = fbx_dots_field(s, a, b, i);
            for (int64_t c = 0; c < d; c++) f[(i * d + c) * FBX_DOTS_LANES + lane] = t[c];
        }
    }
}

/* np (<= 16) vectors of lanes v (v[q]: value q of each sample) into the rows of samples
 * [s0, s1): row (s0 + l) gets v[0][l] .. v[np - 1][l] at `at` (row stride `stride`) */
static inline __attribute__((always_inline)) void fbx_dots_scatter(fbx_v16 *v, int64_t np, int64_t s0, int64_t s1,
                                                                   float *at, int64_t stride) {
    for (int64_t q = np; q < 16; q++) v[q] = (fbx_v16){0};
    fbx_transpose16(v);
    for (int64_t l = 0; l < s1 - s0; l++) memcpy(at + (s0 + l) * stride, &v[l], sizeof(float) * (size_t)np);
}

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
    fbx_v16 fi[FBX_DOTS_MAXD], pend[16];
    int64_t p0 = d, np = 0; /* the dots pending, pairs p0 .. p0 + np of the out rows */
    for (int64_t i = 1 - off; i < n; i++) {
        for (int64_t c = 0; c < d; c++) fi[c] = fbx_ld16(f + (i * d + c) * FBX_DOTS_LANES);
        for (int64_t j = 0; j < i + off; j++) {
            const float *fj = f + j * d * FBX_DOTS_LANES;
            fbx_v16 acc = fi[0] * fbx_ld16(fj);
            for (int64_t c = 1; c < d; c++) acc += fi[c] * fbx_ld16(fj + c * FBX_DOTS_LANES);
            pend[np++] = acc;
            if (np == 16) {
                fbx_dots_scatter(pend, np, s0, s1, out + p0, s->width);
                p0 += np;
                np = 0;
            }
        }
    }
    if (np) fbx_dots_scatter(pend, np, s0, s1, out + p0, s->width);
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

/* where field i's gradient of sample row (its arm's and row's) goes: x, a bag, the bias (or nowhere) */
static inline float *fbx_dots_grad_of(const fbx_dots_shape *s, int64_t smp, int64_t i) {
    if (i == 0) return s->grad_x + smp * s->d;
    if (i <= s->nf) return s->grad_bags + (smp * s->nf + (i - 1)) * s->d;
    return s->grad_bias_rows ? s->grad_bias_rows + smp * s->d : NULL;
}

static inline __attribute__((always_inline)) void fbx_dots_back_body(const fbx_dots_shape *s, int64_t s0, int64_t s1,
                                                                     const float *f, const float *gp, const int64_t d) {
    const int64_t n = s->n, off = s->self_inter ? 1 : 0;
    fbx_v16 acc[FBX_DOTS_MAXD];
    for (int64_t i = 0; i < n; i++) { /* dT_i = sum over j in order of g_ij T_j (2 g_ii T_i on the diagonal) */
        for (int64_t c = 0; c < d; c++) acc[c] = (fbx_v16){0};
        for (int64_t j = 0; j < n; j++) {
            fbx_v16 g;
            if (j < i || (j == i && off)) g = fbx_ld16(gp + (i * (i - 1) / 2 + off * i + j) * FBX_DOTS_LANES);
            else if (j > i) g = fbx_ld16(gp + (j * (j - 1) / 2 + off * j + i) * FBX_DOTS_LANES);
            else continue; /* no self-interaction: T_i's own pair is not a dot */
            if (j == i) g = 2.0f * g;
            const float *fj = f + j * d * FBX_DOTS_LANES;
            for (int64_t c = 0; c < d; c++) acc[c] += g * fbx_ld16(fj + c * FBX_DOTS_LANES);
        }
        if (i == 0) /* x's gradient: its own part of the out rows' gradient, then its dots' */
            for (int64_t c = 0; c < d; c++) {
                fbx_v16 own;
                for (int64_t l = 0; l < FBX_DOTS_LANES; l++) own[l] = s0 + l < s1 ? s->grad[(s0 + l) * s->width + c] : 0.0f;
                acc[c] = own + acc[c];
            }
        if (i > s->nf && !s->grad_bias_rows) continue;
        float *at = fbx_dots_grad_of(s, 0, i); /* sample 0's; samples a row stride apart */
        const int64_t stride = i == 0 ? d : (i <= s->nf ? s->nf * d : d);
        for (int64_t c0 = 0; c0 < d; c0 += 16)
            fbx_dots_scatter(acc + c0, d - c0 < 16 ? d - c0 : 16, s0, s1, at + c0, stride);
    }
}

/* samples [s0, s1) (at most FBX_DOTS_LANES): the fields' gradients; grad_bias_rows one row per
 * sample (f: (n * d + pairs + 16) * LANES floats of scratch) */
FBX_CLONES static void fbx_dots_back_lanes(const fbx_dots_shape *s, int64_t s0, int64_t s1, float *f) {
    const int64_t n = s->n, d = s->d, pairs = s->width - d;
    float *gp = f + n * d * FBX_DOTS_LANES; /* the pairs' gradients lane by lane: gp[p * LANES + l] */
    fbx_dots_gather(s, s0, s1, f);
    fbx_v16 r[16];
    for (int64_t p0 = 0; p0 < pairs; p0 += 16) { /* sixteen pairs' gradients of each sample, transposed to lanes */
        const int64_t np = pairs - p0 < 16 ? pairs - p0 : 16;
        for (int64_t l = 0; l < 16; l++) {
            r[l] = (fbx_v16){0};
            if (s0 + l < s1) memcpy(&r[l], s->grad + (s0 + l) * s->width + d + p0, sizeof(float) * (size_t)np);
        }
        fbx_transpose16(r);
        for (int64_t q = 0; q < 16; q++) fbx_st16(gp + (p0 + q) * FBX_DOTS_LANES, r[q]); /* (the scratch has room) */
    }
#define FBX_DOTS_BACK(D) fbx_dots_back_body(s, s0, s1, f, gp, D)
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
    const size_t scratch = sizeof(float) * (size_t)((s->n * s->d + (backward ? s->width - s->d + 16 : 0)) * FBX_DOTS_LANES);
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
