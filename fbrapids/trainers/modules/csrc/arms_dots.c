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
 *
 * Where the time goes: a block of sixteen samples is moved into lanes (the fields, and in
 * the backward the out rows' gradient) and back out to rows through 16 x 16 transposes into
 * a scratch of its own, so the sums run from registers; four dots run side by side (one
 * sum's chain of adds waits on each add); the rows of the next block are fetched ahead
 * (sixteen rows read side by side are sixteen streams, more than the hardware follows).
 * Measured at [8 arms, 2048, 26 bags + bias, 16], 2 threads: forward 3.5 -> 2.1 ms, backward
 * 7.5 -> 3.3 ms (on the machine of the time).  On the 2-core Intel Xeon benchmark box
 * (2026-11-30): forward 5.9-7.5 ms, forward and backward 15.5-18.8 ms; built with fused
 * multiply-adds, 4.2-5.9 and 11.3-16.9 ms, not taken: other bits than the clones without them.
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

/* field i of sample smp (x's, a bag's or its arm's bias row): its row of x and of the bags is smp */
static inline const float *fbx_dots_field_of(const fbx_dots_shape *s, int64_t smp, int64_t i) {
    if (i == 0) return s->x + smp * s->d;
    if (i <= s->nf) return s->bags + (smp * s->nf + (i - 1)) * s->d;
    return s->bias + (smp / s->nb) * s->d;
}

/* the fields of samples [s0, s1) (at most FBX_DOTS_LANES) lane by lane: f[(i * d + c) * LANES + lane];
 * lanes past s1 are 0.  Sixteen columns at a time through a transpose where d allows. */
static inline __attribute__((always_inline)) void fbx_dots_gather(const fbx_dots_shape *s, int64_t s0, int64_t s1,
                                                                  float *f) {
    const int64_t n = s->n, d = s->d, cnt = s1 - s0;
    if (d % 16 == 0) {
        const float *bias_of[FBX_DOTS_LANES]; /* each lane's arm's bias row (one division a lane, not a field) */
        for (int64_t l = 0; l < FBX_DOTS_LANES; l++)
            bias_of[l] = s->bias && l < cnt ? s->bias + ((s0 + l) / s->nb) * d : NULL;
        fbx_v16 r[16];
        for (int64_t i = 0; i < n; i++)
            for (int64_t c0 = 0; c0 < d; c0 += 16) {
                for (int64_t l = 0; l < 16; l++) {
                    const float *t = i <= s->nf ? fbx_dots_field_of(s, s0 + l, i) : bias_of[l];
                    r[l] = l < cnt ? fbx_ld16(t + c0) : (fbx_v16){0};
                    if (l < cnt && i <= s->nf) /* the next block's (sixteen rows read side by side) */
                        __builtin_prefetch(t + c0 + FBX_DOTS_LANES * (i == 0 ? d : s->nf * d));
                }
                fbx_transpose16(r);
                for (int64_t c = 0; c < 16; c++) fbx_st16(f + (i * d + c0 + c) * FBX_DOTS_LANES, r[c]);
            }
        return;
    }
    if (cnt < FBX_DOTS_LANES) memset(f, 0, sizeof(float) * (size_t)(n * d * FBX_DOTS_LANES));
    for (int64_t smp = s0; smp < s1; smp++) {
        const int64_t lane = smp - s0;
        for (int64_t i = 0; i < n; i++) {
            const float *t = fbx_dots_field_of(s, smp, i);
            for (int64_t c = 0; c < d; c++) f[(i * d + c) * FBX_DOTS_LANES + lane] = t[c];
        }
    }
}

/* lanes to rows: np (<= 16) vectors of lanes at lanes[q * LANES] (value q of each sample)
 * into the rows of samples [s0, s1): row (s0 + l) gets value 0 .. np - 1 of lane l at `at`
 * (rows `stride` floats apart) */
static inline __attribute__((always_inline)) void fbx_dots_rows_out(const float *lanes, int64_t np, int64_t s0,
                                                                    int64_t s1, float *at, int64_t stride) {
    fbx_v16 r[16];
    for (int64_t q = 0; q < 16; q++) r[q] = q < np ? fbx_ld16(lanes + q * FBX_DOTS_LANES) : (fbx_v16){0};
    fbx_transpose16(r);
    if (np == 16)
        for (int64_t l = 0; l < s1 - s0; l++) {
            fbx_st16(at + (s0 + l) * stride, r[l]);
            __builtin_prefetch(at + (s0 + l + FBX_DOTS_LANES) * stride, 1); /* the next block's */
        }
    else
        for (int64_t l = 0; l < s1 - s0; l++)
            for (int64_t q = 0; q < np; q++) at[(s0 + l) * stride + q] = r[l][q];
}

/* rows to lanes, fbx_dots_rows_out's inverse: np (<= 16) values of each row of samples
 * [s0, s1) at `at` into lanes[q * LANES + l] (lanes past s1 and values past np are 0) */
static inline __attribute__((always_inline)) void fbx_dots_rows_in(const float *at, int64_t stride, int64_t np,
                                                                   int64_t s0, int64_t s1, float *lanes) {
    fbx_v16 r[16];
    for (int64_t l = 0; l < 16; l++) { /* (a copy of sixteen is one load; memcpy of a variable size was rep movs) */
        r[l] = (fbx_v16){0};
        if (s0 + l < s1 && np == 16) {
            r[l] = fbx_ld16(at + (s0 + l) * stride);
            __builtin_prefetch(at + (s0 + l + FBX_DOTS_LANES) * stride); /* the next block's (sixteen rows read side by side) */
        }
        else if (s0 + l < s1)
            for (int64_t q = 0; q < np; q++) r[l][q] = at[(s0 + l) * stride + q];
    }
    fbx_transpose16(r);
    for (int64_t q = 0; q < 16; q++) fbx_st16(lanes + q * FBX_DOTS_LANES, r[q]);
}

/* the loops below for the column count d known to the compiler where it is a common one */
#define FBX_DOTS_BY_DIM(d, CALL) \
    switch (d) { \
        case 8: CALL(8); break; \
        case 16: CALL(16); break; \
        case 32: CALL(32); break; \
        default: CALL(d); \
    }

/* field i (fi, in registers) against fields j .. j + 3 (from fj): four sums side by side, each
 * in column order (one sum alone would wait on its adds' latency at every column) */
static inline __attribute__((always_inline)) void fbx_dots_four(const fbx_v16 *fi, const float *fj, const int64_t d,
                                                                float *dl) {
    const int64_t st = d * FBX_DOTS_LANES; /* one field to the next */
    fbx_v16 a0 = fi[0] * fbx_ld16(fj), a1 = fi[0] * fbx_ld16(fj + st);
    fbx_v16 a2 = fi[0] * fbx_ld16(fj + 2 * st), a3 = fi[0] * fbx_ld16(fj + 3 * st);
    for (int64_t c = 1; c < d; c++) {
        const float *at = fj + c * FBX_DOTS_LANES;
        a0 += fi[c] * fbx_ld16(at);
        a1 += fi[c] * fbx_ld16(at + st);
        a2 += fi[c] * fbx_ld16(at + 2 * st);
        a3 += fi[c] * fbx_ld16(at + 3 * st);
    }
    fbx_st16(dl, a0);
    fbx_st16(dl + FBX_DOTS_LANES, a1);
    fbx_st16(dl + 2 * FBX_DOTS_LANES, a2);
    fbx_st16(dl + 3 * FBX_DOTS_LANES, a3);
}

/* every pair's dot of the block, lane by lane, into dl[p * LANES] (p: the pair's place in DLRM's order) */
static inline __attribute__((always_inline)) void fbx_dots_lanes_body(const fbx_dots_shape *s, const float *f,
                                                                      float *dl, const int64_t d) {
    const int64_t n = s->n, off = s->self_inter ? 1 : 0;
    fbx_v16 fi[FBX_DOTS_MAXD];
    int64_t p = 0;
    for (int64_t i = 1 - off; i < n; i++) {
        for (int64_t c = 0; c < d; c++) fi[c] = fbx_ld16(f + (i * d + c) * FBX_DOTS_LANES);
        int64_t j = 0;
        for (; j + 4 <= i + off; j += 4, p += 4) fbx_dots_four(fi, f + j * d * FBX_DOTS_LANES, d, dl + p * FBX_DOTS_LANES);
        for (; j < i + off; j++, p++) {
            const float *fj = f + j * d * FBX_DOTS_LANES;
            fbx_v16 acc = fi[0] * fbx_ld16(fj);
            for (int64_t c = 1; c < d; c++) acc += fi[c] * fbx_ld16(fj + c * FBX_DOTS_LANES);
            fbx_st16(dl + p * FBX_DOTS_LANES, acc);
        }
    }
}

/* samples [s0, s1) (at most FBX_DOTS_LANES): their out rows (f: fbx_dots_scratch floats) */
FBX_CLONES static void fbx_dots_lanes(const fbx_dots_shape *s, int64_t s0, int64_t s1, float *f) {
    const int64_t d = s->d, pairs = s->width - d;
    float *out = s->out, *dl = f + s->n * d * FBX_DOTS_LANES; /* the dots lane by lane */
    fbx_dots_gather(s, s0, s1, f);
    for (int64_t smp = s0; smp < s1; smp++) memcpy(out + smp * s->width, s->x + smp * d, sizeof(float) * (size_t)d);
#define FBX_DOTS_FWD(D) fbx_dots_lanes_body(s, f, dl, D)
    FBX_DOTS_BY_DIM(d, FBX_DOTS_FWD)
#undef FBX_DOTS_FWD
    for (int64_t p0 = 0; p0 < pairs; p0 += 16)
        fbx_dots_rows_out(dl + p0 * FBX_DOTS_LANES, pairs - p0 < 16 ? pairs - p0 : 16, s0, s1, out + d + p0, s->width);
}

/* where field i's gradient of sample 0 goes (samples a row stride apart: d, nf * d, d): x, a
 * bag, the bias (or nowhere) */
static inline float *fbx_dots_grad_of(const fbx_dots_shape *s, int64_t i) {
    if (i == 0) return s->grad_x;
    if (i <= s->nf) return s->grad_bags + (i - 1) * s->d;
    return s->grad_bias_rows;
}

/* every field's gradient of the block (gl: d * LANES floats of scratch for one field's) */
static inline __attribute__((always_inline)) void fbx_dots_back_body(const fbx_dots_shape *s, int64_t s0, int64_t s1,
                                                                     const float *f, const float *gp, float *gl,
                                                                     const int64_t d) {
    const int64_t n = s->n, off = s->self_inter ? 1 : 0;
    for (int64_t i = 0; i < n; i++) { /* dT_i = sum over j in order of g_ij T_j (2 g_ii T_i on the diagonal) */
        if (i > s->nf && !s->grad_bias_rows) continue;
        fbx_v16 acc[FBX_DOTS_MAXD];
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
        if (i == 0) /* x's gradient: its own part of the out rows' gradient (in gl), then its dots' */
            for (int64_t c = 0; c < d; c++) acc[c] = fbx_ld16(gl + c * FBX_DOTS_LANES) + acc[c];
        for (int64_t c = 0; c < d; c++) fbx_st16(gl + c * FBX_DOTS_LANES, acc[c]);
        const int64_t stride = i == 0 ? d : (i <= s->nf ? s->nf * d : d);
        for (int64_t c0 = 0; c0 < d; c0 += 16)
            fbx_dots_rows_out(gl + c0 * FBX_DOTS_LANES, d - c0 < 16 ? d - c0 : 16, s0, s1,
                              fbx_dots_grad_of(s, i) + c0, stride);
    }
}

/* samples [s0, s1) (at most FBX_DOTS_LANES): the fields' gradients; grad_bias_rows one row per
 * sample (f: fbx_dots_scratch floats) */
FBX_CLONES static void fbx_dots_back_lanes(const fbx_dots_shape *s, int64_t s0, int64_t s1, float *f) {
    const int64_t n = s->n, d = s->d, pairs = s->width - d;
    float *gp = f + n * d * FBX_DOTS_LANES; /* the pairs' gradients lane by lane: gp[p * LANES + l] */
    float *gl = gp + (pairs + 16) * FBX_DOTS_LANES; /* one field's gradient lane by lane */
    fbx_dots_gather(s, s0, s1, f);
    for (int64_t p0 = 0; p0 < pairs; p0 += 16) /* (the scratch has room for a last block of sixteen) */
        fbx_dots_rows_in(s->grad + d + p0, s->width, pairs - p0 < 16 ? pairs - p0 : 16, s0, s1, gp + p0 * FBX_DOTS_LANES);
    for (int64_t c0 = 0; c0 < d; c0 += 16) /* x's own part of the out rows' gradient */
        fbx_dots_rows_in(s->grad + c0, s->width, d - c0 < 16 ? d - c0 : 16, s0, s1, gl + c0 * FBX_DOTS_LANES);
#define FBX_DOTS_BACK(D) fbx_dots_back_body(s, s0, s1, f, gp, gl, D)
    FBX_DOTS_BY_DIM(d, FBX_DOTS_BACK)
#undef FBX_DOTS_BACK
}

/* the floats of a block's scratch: the fields lane by lane, the pairs' (dots or gradients)
 * with room for a last block of sixteen, one field's gradient (d rounded up to sixteen) */
static size_t fbx_dots_scratch(const fbx_dots_shape *s) {
    const int64_t pairs = s->width - s->d, d16 = (s->d + 15) / 16 * 16;
    return (size_t)((s->n * s->d + pairs + 16 + d16) * FBX_DOTS_LANES);
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
    const size_t scratch = sizeof(float) * fbx_dots_scratch(s);
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
