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
 * The per-sample loops take one of two forms, compiled each for the machines it runs on: sixteen
 * samples a 512-bit vector for AVX-512 (gcc's target attribute), eight samples a vector, twice,
 * for AVX2 and the baseline (target_clones; the loader picks the machine's best).  gcc keeps a
 * vector wider than the machine's registers in memory, moves it in pieces (through general
 * registers too) and lowers its shuffles to one scalar move an element: on a 2-core AVX2 AMD
 * EPYC the sixteen-lane loops ran the forward in 19.6 ms and forward and backward in 67-72 ms
 * at [8 arms, 2048, 26 bags + bias, 16], the eight-lane ones in 8.4 and 28 ms.  Every sum's
 * arithmetic and order are the same in both forms (no fused multiply-add: fp-contract=off), so
 * are the bits; fbx_arms_dots_form picks one for a test.
 *
 * Where the time goes: a block of sixteen samples is moved into lanes (the fields, and in
 * the backward the out rows' gradient) and back out to rows through 16 x 16 transposes into
 * a scratch of its own, so the sums run from registers; four dots run side by side (one
 * sum's chain of adds waits on each add); the rows of the next block are fetched ahead
 * (sixteen rows read side by side are sixteen streams, more than the hardware follows).  A
 * gradient laid out by column (the next layer's input gradient computed as W^T G^T, which MKL
 * runs twice as fast as G W there) is read into lanes as it lies, with no transpose.
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
/* the sixteen-lane form for AVX-512 only, the eight-lane form for AVX2 and the baseline (each
 * form compiled only where it runs: one gcc pass of every form for every target took 72 s) */
#define FBX_DOTS_X86_GCC 1
#define FBX_WIDE __attribute__((target("avx512f"), optimize("fp-contract=off")))
#define FBX_NARROW __attribute__((target_clones("avx2", "default"), optimize("fp-contract=off")))
#else
#define FBX_DOTS_X86_GCC 0
#define FBX_WIDE
#define FBX_NARROW
#endif

typedef struct {
    const float *x, *bags, *bias;
    int64_t nb, nf, d, n, self_inter, width;
    float *out;                                    /* the forward's */
    const float *grad;                             /* the backward's: [m][nb][width], or by column */
    int64_t grad_by_column;                        /* 1: grad laid out [m][width][nb] */
    float *grad_x, *grad_bags, *grad_bias_rows;
} fbx_dots_shape;

#define FBX_DOTS_LANES 16 /* samples side by side: each loop below runs across them */

/* sixteen floats as one value (gcc / clang vector extension): element-wise arithmetic, one
 * lane per sample; loads and stores through memcpy (any alignment) */
typedef float fbx_v16 __attribute__((vector_size(64)));
typedef int32_t fbx_dots_mask __attribute__((vector_size(64)));
static inline fbx_v16 fbx_ld16(const float *p) { fbx_v16 v; memcpy(&v, p, sizeof v); return v; }
static inline void fbx_st16(float *p, fbx_v16 v) { memcpy(p, &v, sizeof v); }

/* eight floats: half the lanes, the form of the loops on a machine without AVX-512 (wider
 * vectors there gcc keeps in memory and moves in pieces, through general registers too) */
typedef float fbx_v8 __attribute__((vector_size(32)));
typedef int32_t fbx_dots_mask8 __attribute__((vector_size(32)));
static inline fbx_v8 fbx_ld8(const float *p) { fbx_v8 v; memcpy(&v, p, sizeof v); return v; }
static inline void fbx_st8(float *p, fbx_v8 v) { memcpy(p, &v, sizeof v); }

/* whether this machine has AVX-512's 32 registers of sixteen floats and its two-vector shuffles:
 * the loops take a form of eight lanes at a time where it has not.  The sums are the same. */
static int fbx_dots_machine_wide(void) {
#if FBX_DOTS_X86_GCC
    return __builtin_cpu_supports("avx512f");
#else
    return 1;
#endif
}

/* the form the loops take: -1 the machine's, 0 eight lanes, 1 sixteen (fbx_arms_dots_form) */
static int fbx_dots_form = -1;

/* a 16 x 16 matrix transposed from rows to rows: row q of dst[c] gets element c of src[q]
 * (src[q] NULL: a row of zeros), sixteen floats a row.  In registers of sixteen floats: four
 * rounds of two-vector shuffles, the round on bit k swapping the elements whose row and column
 * differ in bit k (no arithmetic).  Without AVX-512 gcc lowers a sixteen-float shuffle to one
 * scalar move an element (628 a transpose) and keeps sixteen-float values in memory, moved in
 * pieces: there each row is two halves of eight floats, the rounds on bits 0-2 shuffle inside
 * the halves (AVX's shuffles and blends) and the round on bit 3 swaps whole halves (moves). */
#define FBX_LO(k, c) (((c) & (k)) ? 16 + ((c) ^ (k)) : (c))
#define FBX_HI(k, c) (((c) & (k)) ? 16 + (c) : ((c) ^ (k)))
#define FBX_MASK(F, k) {F(k, 0), F(k, 1), F(k, 2), F(k, 3), F(k, 4), F(k, 5), F(k, 6), F(k, 7), \
                        F(k, 8), F(k, 9), F(k, 10), F(k, 11), F(k, 12), F(k, 13), F(k, 14), F(k, 15)}
#define FBX_LO8(k, c) (((c) & (k)) ? 8 + ((c) ^ (k)) : (c))
#define FBX_HI8(k, c) (((c) & (k)) ? 8 + (c) : ((c) ^ (k)))
#define FBX_MASK8(F, k) {F(k, 0), F(k, 1), F(k, 2), F(k, 3), F(k, 4), F(k, 5), F(k, 6), F(k, 7)}
#if defined(__clang__) /* clang's two-vector shuffle takes its indices as constants */
#define FBX_SHUFFLE(x0, x1, F, k) __builtin_shufflevector(x0, x1, F(k, 0), F(k, 1), F(k, 2), F(k, 3), F(k, 4), \
        F(k, 5), F(k, 6), F(k, 7), F(k, 8), F(k, 9), F(k, 10), F(k, 11), F(k, 12), F(k, 13), F(k, 14), F(k, 15))
#define FBX_SHUFFLE8(x0, x1, F, k) __builtin_shufflevector(x0, x1, F(k, 0), F(k, 1), F(k, 2), F(k, 3), F(k, 4), \
        F(k, 5), F(k, 6), F(k, 7))
#else
#define FBX_SHUFFLE(x0, x1, F, k) __builtin_shuffle(x0, x1, (fbx_dots_mask)FBX_MASK(F, k))
#define FBX_SHUFFLE8(x0, x1, F, k) __builtin_shuffle(x0, x1, (fbx_dots_mask8)FBX_MASK8(F, k))
#endif
#define FBX_ROUND(k) do { \
        for (int q = 0; q < 16; q++) \
            if (!(q & (k))) { \
                const fbx_v16 x0 = r[q], x1 = r[q | (k)]; \
                r[q] = FBX_SHUFFLE(x0, x1, FBX_LO, k); \
                r[q | (k)] = FBX_SHUFFLE(x0, x1, FBX_HI, k); \
            } \
    } while (0)
#define FBX_ROUND8(k) do { \
        for (int q = 0; q < 16; q++) \
            if (!(q & (k))) \
                for (int h = 0; h < 2; h++) { \
                    const fbx_v8 x0 = v[2 * q + h], x1 = v[2 * (q | (k)) + h]; \
                    v[2 * q + h] = FBX_SHUFFLE8(x0, x1, FBX_LO8, k); \
                    v[2 * (q | (k)) + h] = FBX_SHUFFLE8(x0, x1, FBX_HI8, k); \
                } \
    } while (0)
static inline __attribute__((always_inline)) void fbx_transpose16(const float *const *src, float *const *dst,
                                                                   const int wide) {
    if (wide) {
        fbx_v16 r[16];
        for (int q = 0; q < 16; q++) r[q] = src[q] ? fbx_ld16(src[q]) : (fbx_v16){0};
        FBX_ROUND(1);
        FBX_ROUND(2);
        FBX_ROUND(4);
        FBX_ROUND(8);
        for (int c = 0; c < 16; c++) fbx_st16(dst[c], r[c]);
        return;
    }
    fbx_v8 v[32]; /* v[2q] row q's first eight, v[2q + 1] its last eight */
    for (int q = 0; q < 16; q++) {
        v[2 * q] = src[q] ? fbx_ld8(src[q]) : (fbx_v8){0};
        v[2 * q + 1] = src[q] ? fbx_ld8(src[q] + 8) : (fbx_v8){0};
    }
    FBX_ROUND8(1);
    FBX_ROUND8(2);
    FBX_ROUND8(4);
    for (int c = 0; c < 8; c++) { /* bit 3: row c's last half is row c + 8's first, and the other way */
        fbx_st8(dst[c], v[2 * c]);
        fbx_st8(dst[c] + 8, v[2 * (c + 8)]);
        fbx_st8(dst[c + 8], v[2 * c + 1]);
        fbx_st8(dst[c + 8] + 8, v[2 * (c + 8) + 1]);
    }
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
                                                                  float *f, const int wide) {
    const int64_t n = s->n, d = s->d, cnt = s1 - s0;
    if (d % 16 == 0) {
        const float *bias_of[FBX_DOTS_LANES]; /* each lane's arm's bias row (one division a lane, not a field) */
        for (int64_t l = 0; l < FBX_DOTS_LANES; l++)
            bias_of[l] = s->bias && l < cnt ? s->bias + ((s0 + l) / s->nb) * d : NULL;
        const float *src[16];
        float *dst[16];
        for (int64_t i = 0; i < n; i++)
            for (int64_t c0 = 0; c0 < d; c0 += 16) {
                for (int64_t l = 0; l < 16; l++) {
                    const float *t = i <= s->nf ? fbx_dots_field_of(s, s0 + l, i) : bias_of[l];
                    src[l] = l < cnt ? t + c0 : NULL;
                    if (l < cnt && i <= s->nf) /* the next block's (sixteen rows read side by side) */
                        __builtin_prefetch(t + c0 + FBX_DOTS_LANES * (i == 0 ? d : s->nf * d));
                    dst[l] = f + (i * d + c0 + l) * FBX_DOTS_LANES;
                }
                fbx_transpose16(src, dst, wide);
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
                                                                    int64_t s1, float *at, int64_t stride,
                                                                    const int wide) {
    float part[16][16]; /* the rows of a block of fewer values than sixteen, or past s1 */
    const float *src[16];
    float *dst[16];
    for (int64_t q = 0; q < 16; q++) src[q] = q < np ? lanes + q * FBX_DOTS_LANES : NULL;
    for (int64_t l = 0; l < 16; l++) {
        dst[l] = np == 16 && s0 + l < s1 ? at + (s0 + l) * stride : part[l];
        if (np == 16 && s0 + l < s1)
            __builtin_prefetch(at + (s0 + l + FBX_DOTS_LANES) * stride, 1); /* the next block's */
    }
    fbx_transpose16(src, dst, wide);
    if (np < 16)
        for (int64_t l = 0; l < s1 - s0; l++)
            for (int64_t q = 0; q < np; q++) at[(s0 + l) * stride + q] = part[l][q];
}

/* rows to lanes, fbx_dots_rows_out's inverse: np (<= 16) values of each row of samples
 * [s0, s1) at `at` into lanes[q * LANES + l] (lanes past s1 and values past np are 0) */
static inline __attribute__((always_inline)) void fbx_dots_rows_in(const float *at, int64_t stride, int64_t np,
                                                                   int64_t s0, int64_t s1, float *lanes,
                                                                   const int wide) {
    float part[16][16]; /* the rows of fewer values than sixteen, zeros after them */
    const float *src[16];
    float *dst[16];
    for (int64_t l = 0; l < 16; l++) {
        src[l] = NULL;
        if (s0 + l < s1 && np == 16) {
            src[l] = at + (s0 + l) * stride;
            __builtin_prefetch(at + (s0 + l + FBX_DOTS_LANES) * stride); /* the next block's (sixteen rows read side by side) */
        }
        else if (s0 + l < s1) {
            for (int64_t q = 0; q < 16; q++) part[l][q] = q < np ? at[(s0 + l) * stride + q] : 0.0f;
            src[l] = part[l];
        }
        dst[l] = lanes + l * FBX_DOTS_LANES;
    }
    fbx_transpose16(src, dst, wide);
}

/* columns [col0, col0 + np) (np <= 16) of the gradient laid out by column ([m][width][nb]: a
 * column's samples of one arm side by side) into lanes[q * LANES + l] for the samples [s0, s1):
 * sixteen floats read as they lie where the block is whole and inside one arm (no transpose);
 * lanes past s1 and values past np are 0 */
static inline __attribute__((always_inline)) void fbx_dots_cols_in(const fbx_dots_shape *s, int64_t col0, int64_t np,
                                                                   int64_t s0, int64_t s1, float *lanes) {
    const int64_t nb = s->nb, w = s->width, a0 = s0 / nb;
    const int whole = s1 - s0 == FBX_DOTS_LANES && (s1 - 1) / nb == a0;
    for (int64_t q = 0; q < FBX_DOTS_LANES; q++) {
        float *dst = lanes + q * FBX_DOTS_LANES;
        if (q >= np) {
            memset(dst, 0, sizeof(float) * FBX_DOTS_LANES);
        } else if (whole) {
            const float *src = s->grad + (a0 * w + col0 + q) * nb + (s0 - a0 * nb);
            memcpy(dst, src, sizeof(float) * FBX_DOTS_LANES);
            __builtin_prefetch(src + FBX_DOTS_LANES); /* the next block's */
        } else {
            for (int64_t l = 0; l < FBX_DOTS_LANES; l++) {
                const int64_t smp = s0 + l, a = smp / nb;
                dst[l] = smp < s1 ? s->grad[(a * w + col0 + q) * nb + (smp - a * nb)] : 0.0f;
            }
        }
    }
}

/* columns [col0, col0 + np) (np <= 16) of the out rows' gradient of samples [s0, s1) into
 * lanes[q * LANES + l], as the gradient lies: by row (through a transpose) or by column */
static inline __attribute__((always_inline)) void fbx_dots_grad_in(const fbx_dots_shape *s, int64_t col0, int64_t np,
                                                                   int64_t s0, int64_t s1, float *lanes,
                                                                   const int wide) {
    if (s->grad_by_column) fbx_dots_cols_in(s, col0, np, s0, s1, lanes);
    else fbx_dots_rows_in(s->grad + col0, s->width, np, s0, s1, lanes, wide);
}

/* the loops below for the column count d known to the compiler where it is a common one */
#define FBX_DOTS_BY_DIM(d, CALL) \
    switch (d) { \
        case 8: CALL(8); break; \
        case 16: CALL(16); break; \
        case 32: CALL(32); break; \
        default: CALL(d); \
    }

/* where field i's gradient of sample 0 goes (samples a row stride apart: d, nf * d, d): x, a
 * bag, the bias (or nowhere) */
static inline float *fbx_dots_grad_of(const fbx_dots_shape *s, int64_t i) {
    if (i == 0) return s->grad_x;
    if (i <= s->nf) return s->grad_bags + (i - 1) * s->d;
    return s->grad_bias_rows;
}

/* The loops of one form, W lanes a vector of type V (LD / ST its loads and stores), defined
 * once for both forms: fbx_dots_four_W, fbx_dots_lanes_body_W and fbx_dots_back_body_W.  Each
 * runs over the lanes [h, h + W) of the block's vectors, h = 0 (then 8, in the eight-lane form):
 * every sum the same, in the same order, lane by lane.
 *
 * fbx_dots_four_W: field i (fi, in registers) against fields j .. j + 3 (from fj): four sums
 * side by side, each in column order (one sum alone would wait on its adds' latency at every
 * column).
 * fbx_dots_lanes_body_W: every pair's dot of the block, lane by lane, into dl[p * LANES] (p:
 * the pair's place in DLRM's order).
 * fbx_dots_back_body_W: every field's gradient of the block (gl: d * LANES floats of scratch
 * for one field's): dT_i = sum over j in order of g_ij T_j (2 g_ii T_i on the diagonal; with no
 * self-interaction T_i's own pair is not a dot); x's gradient is its own part of the out rows'
 * gradient (in gl) plus its dots'. */
#define FBX_DOTS_LOOPS(W, V, LD, ST, WIDE) \
    static inline __attribute__((always_inline)) void fbx_dots_four_##W(const V *fi, const float *fj, const int64_t d, \
                                                                        float *dl) { \
        const int64_t st = d * FBX_DOTS_LANES; /* one field to the next */ \
        V a0 = fi[0] * LD(fj), a1 = fi[0] * LD(fj + st), a2 = fi[0] * LD(fj + 2 * st), a3 = fi[0] * LD(fj + 3 * st); \
        for (int64_t c = 1; c < d; c++) { \
            const float *at = fj + c * FBX_DOTS_LANES; \
            a0 += fi[c] * LD(at); \
            a1 += fi[c] * LD(at + st); \
            a2 += fi[c] * LD(at + 2 * st); \
            a3 += fi[c] * LD(at + 3 * st); \
        } \
        ST(dl, a0); \
        ST(dl + FBX_DOTS_LANES, a1); \
        ST(dl + 2 * FBX_DOTS_LANES, a2); \
        ST(dl + 3 * FBX_DOTS_LANES, a3); \
    } \
    static inline __attribute__((always_inline)) void fbx_dots_lanes_body_##W(const fbx_dots_shape *s, const float *f, \
                                                                              float *dl, const int64_t d) { \
        const int64_t n = s->n, off = s->self_inter ? 1 : 0; \
        V fi[FBX_DOTS_MAXD]; \
        for (int64_t h = 0; h < FBX_DOTS_LANES; h += W) { \
            int64_t p = 0; \
            for (int64_t i = 1 - off; i < n; i++) { \
                for (int64_t c = 0; c < d; c++) fi[c] = LD(f + (i * d + c) * FBX_DOTS_LANES + h); \
                int64_t j = 0; \
                for (; j + 4 <= i + off; j += 4, p += 4) \
                    fbx_dots_four_##W(fi, f + j * d * FBX_DOTS_LANES + h, d, dl + p * FBX_DOTS_LANES + h); \
                for (; j < i + off; j++, p++) { \
                    const float *fj = f + j * d * FBX_DOTS_LANES + h; \
                    V acc = fi[0] * LD(fj); \
                    for (int64_t c = 1; c < d; c++) acc += fi[c] * LD(fj + c * FBX_DOTS_LANES); \
                    ST(dl + p * FBX_DOTS_LANES + h, acc); \
                } \
            } \
        } \
    } \
    static inline __attribute__((always_inline)) void fbx_dots_back_body_##W(const fbx_dots_shape *s, int64_t s0, \
                                                                             int64_t s1, const float *f, \
                                                                             const float *gp, float *gl, \
                                                                             const int64_t d) { \
        const int64_t n = s->n, off = s->self_inter ? 1 : 0; \
        for (int64_t i = 0; i < n; i++) { \
            if (i > s->nf && !s->grad_bias_rows) continue; \
            for (int64_t h = 0; h < FBX_DOTS_LANES; h += W) { \
                V acc[FBX_DOTS_MAXD]; \
                for (int64_t c = 0; c < d; c++) acc[c] = (V){0}; \
                for (int64_t j = 0; j < n; j++) { \
                    V g; \
                    if (j < i || (j == i && off)) g = LD(gp + (i * (i - 1) / 2 + off * i + j) * FBX_DOTS_LANES + h); \
                    else if (j > i) g = LD(gp + (j * (j - 1) / 2 + off * j + i) * FBX_DOTS_LANES + h); \
                    else continue; \
                    if (j == i) g = 2.0f * g; \
                    const float *fj = f + j * d * FBX_DOTS_LANES + h; \
                    for (int64_t c = 0; c < d; c++) acc[c] += g * LD(fj + c * FBX_DOTS_LANES); \
                } \
                if (i == 0) \
                    for (int64_t c = 0; c < d; c++) acc[c] = LD(gl + c * FBX_DOTS_LANES + h) + acc[c]; \
                for (int64_t c = 0; c < d; c++) ST(gl + c * FBX_DOTS_LANES + h, acc[c]); \
            } \
            const int64_t stride = i == 0 ? d : (i <= s->nf ? s->nf * d : d); \
            for (int64_t c0 = 0; c0 < d; c0 += 16) \
                fbx_dots_rows_out(gl + c0 * FBX_DOTS_LANES, d - c0 < 16 ? d - c0 : 16, s0, s1, \
                                  fbx_dots_grad_of(s, i) + c0, stride, WIDE); \
        } \
    }
FBX_DOTS_LOOPS(16, fbx_v16, fbx_ld16, fbx_st16, 1)
FBX_DOTS_LOOPS(8, fbx_v8, fbx_ld8, fbx_st8, 0)

/* samples [s0, s1) (at most FBX_DOTS_LANES): their out rows (f: fbx_dots_scratch floats) */
static inline __attribute__((always_inline)) void fbx_dots_lanes(const fbx_dots_shape *s, int64_t s0, int64_t s1,
                                                                 float *f, const int wide) {
    const int64_t d = s->d, pairs = s->width - d;
    float *out = s->out, *dl = f + s->n * d * FBX_DOTS_LANES; /* the dots lane by lane */
    fbx_dots_gather(s, s0, s1, f, wide);
    for (int64_t smp = s0; smp < s1; smp++) memcpy(out + smp * s->width, s->x + smp * d, sizeof(float) * (size_t)d);
    if (wide) {
#define FBX_DOTS_FWD(D) fbx_dots_lanes_body_16(s, f, dl, D)
        FBX_DOTS_BY_DIM(d, FBX_DOTS_FWD)
#undef FBX_DOTS_FWD
    } else {
#define FBX_DOTS_FWD(D) fbx_dots_lanes_body_8(s, f, dl, D)
        FBX_DOTS_BY_DIM(d, FBX_DOTS_FWD)
#undef FBX_DOTS_FWD
    }
    for (int64_t p0 = 0; p0 < pairs; p0 += 16)
        fbx_dots_rows_out(dl + p0 * FBX_DOTS_LANES, pairs - p0 < 16 ? pairs - p0 : 16, s0, s1, out + d + p0, s->width,
                          wide);
}
FBX_WIDE static void fbx_dots_lanes16(const fbx_dots_shape *s, int64_t s0, int64_t s1, float *f) {
    fbx_dots_lanes(s, s0, s1, f, 1);
}
FBX_NARROW static void fbx_dots_lanes8(const fbx_dots_shape *s, int64_t s0, int64_t s1, float *f) {
    fbx_dots_lanes(s, s0, s1, f, 0);
}

/* samples [s0, s1) (at most FBX_DOTS_LANES): the fields' gradients; grad_bias_rows one row per
 * sample (f: fbx_dots_scratch floats) */
static inline __attribute__((always_inline)) void fbx_dots_back_lanes(const fbx_dots_shape *s, int64_t s0, int64_t s1,
                                                                      float *f, const int wide) {
    const int64_t n = s->n, d = s->d, pairs = s->width - d;
    float *gp = f + n * d * FBX_DOTS_LANES; /* the pairs' gradients lane by lane: gp[p * LANES + l] */
    float *gl = gp + (pairs + 16) * FBX_DOTS_LANES; /* one field's gradient lane by lane */
    fbx_dots_gather(s, s0, s1, f, wide);
    for (int64_t p0 = 0; p0 < pairs; p0 += 16) /* (the scratch has room for a last block of sixteen) */
        fbx_dots_grad_in(s, d + p0, pairs - p0 < 16 ? pairs - p0 : 16, s0, s1, gp + p0 * FBX_DOTS_LANES, wide);
    for (int64_t c0 = 0; c0 < d; c0 += 16) /* x's own part of the out rows' gradient */
        fbx_dots_grad_in(s, c0, d - c0 < 16 ? d - c0 : 16, s0, s1, gl + c0 * FBX_DOTS_LANES, wide);
    if (wide) {
#define FBX_DOTS_BACK(D) fbx_dots_back_body_16(s, s0, s1, f, gp, gl, D)
        FBX_DOTS_BY_DIM(d, FBX_DOTS_BACK)
#undef FBX_DOTS_BACK
    } else {
#define FBX_DOTS_BACK(D) fbx_dots_back_body_8(s, s0, s1, f, gp, gl, D)
        FBX_DOTS_BY_DIM(d, FBX_DOTS_BACK)
#undef FBX_DOTS_BACK
    }
}
FBX_WIDE static void fbx_dots_back_lanes16(const fbx_dots_shape *s, int64_t s0, int64_t s1, float *f) {
    fbx_dots_back_lanes(s, s0, s1, f, 1);
}
FBX_NARROW static void fbx_dots_back_lanes8(const fbx_dots_shape *s, int64_t s0, int64_t s1, float *f) {
    fbx_dots_back_lanes(s, s0, s1, f, 0);
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
    const int wide = fbx_dots_form >= 0 ? fbx_dots_form : fbx_dots_machine_wide();
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
            if (f && backward) (wide ? fbx_dots_back_lanes16 : fbx_dots_back_lanes8)(s, s0, s1, f);
            else if (f) (wide ? fbx_dots_lanes16 : fbx_dots_lanes8)(s, s0, s1, f);
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

/* The backward of fbx_arms_dots given grad [m][nb][width] (grad_by_column 0) or [m][width][nb]
 * (1: as a matmul of the next layer's weights by its gradient gives it): grad_x [m][nb][d], grad_bags
 * [m][nb][nf][d] and (with a bias) grad_bias_rows [m][nb][d], each sample's part of its arm's
 * bias gradient.  Returns 0, or -1 / -2 as fbx_arms_dots. */
int fbx_arms_dots_backward(const float *x, const float *bags, const float *bias, int64_t m, int64_t nb, int64_t nf,
                           int64_t d, int self_inter, const float *grad, int grad_by_column, float *grad_x,
                           float *grad_bags, float *grad_bias_rows, int nthreads) {
    fbx_dots_shape s;
    if (!fbx_dots_shape_of(&s, x, bags, bias, nb, nf, d, self_inter)) return -1;
    s.grad = grad; s.grad_by_column = grad_by_column != 0; s.grad_x = grad_x; s.grad_bags = grad_bags; s.grad_bias_rows = grad_bias_rows;
    return fbx_dots_run(&s, m, 1, nthreads);
}

/* The form the loops take from now on (1: sixteen lanes, 0: eight, -1: the machine's), for a test
 * that the forms give the same bits.  Not for use while a pass runs.  Returns 0, or -1 (the form
 * left as it was) for sixteen lanes on a machine without AVX-512, whose instructions it runs. */
int fbx_arms_dots_form(int form) {
    if (form > 0 && !fbx_dots_machine_wide()) return -1;
    fbx_dots_form = form < 0 ? -1 : (form ? 1 : 0);
    return 0;
}

/* 1 where this machine runs the loops sixteen lanes a vector (AVX-512), else 0 */
int fbx_arms_dots_machine_form(void) { return fbx_dots_machine_wide(); }
