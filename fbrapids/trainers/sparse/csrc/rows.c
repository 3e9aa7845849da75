/* Row movement and the sparse optimizers of the embedding store, in C.
 *
 * The SSD tier's rows are copied through a memory map whose SIGBUS (a file truncated
 * behind it) is an error code, not a crash; its blocks are reserved up front, so a store
 * into the map cannot hit a full disk.  The optimizers update cached rows in place by slot;
 * sum pooling and its backward run over a batch's unique rows.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* Row loops: split over threads as FBX_PAR_ROWS (hashmap.c) says. */

/* The row loops below are written once as always-inlined bodies taking the row width and
 * instantiated for the common widths (FBX_BY_DIM), so that the compiler unrolls and
 * vectorises their column loops; each column's arithmetic (and every sum's order) is the
 * same whatever the width's instance, so the bits are too. */
#define FBX_INLINE static inline __attribute__((always_inline))
#define FBX_BY_DIM(dim, CALL) \
    switch (dim) { \
        case 8: CALL(8); break; \
        case 16: CALL(16); break; \
        case 32: CALL(32); break; \
        case 64: CALL(64); break; \
        default: CALL(dim); \
    }

/* the update of one row given its gradient's sum of squares s */
/* four floats as one value (gcc / clang vector extension): element-wise arithmetic, the
 * same bits as four scalar operations; loads and stores through memcpy (any alignment) */
typedef float fbx_v4 __attribute__((vector_size(16)));
FBX_INLINE fbx_v4 fbx_ld4(const float *p) { fbx_v4 v; memcpy(&v, p, sizeof v); return v; }
FBX_INLINE void fbx_st4(float *p, fbx_v4 v) { memcpy(p, &v, sizeof v); }
#define FBX_V4_MAX 16 /* rows of up to 64 columns, a multiple of 4, are summed in registers */

FBX_INLINE void fbx_adagrad_row(float *row, float *state, const float *g, const int64_t dim, float s, float fdim,
                                float lr, float eps) {
    float acc = *state + s / fdim; /* (the accumulator: row[dim], or a slice's among its row's) */
    *state = acc;
    const float den = sqrtf(acc) + eps;
    int64_t c = 0;
    if (dim % 4 == 0) {
        const fbx_v4 vlr = {lr, lr, lr, lr}, vden = {den, den, den, den};
        for (; c < dim; c += 4) fbx_st4(row + c, fbx_ld4(row + c) - (fbx_ld4(g + c) * vlr) / vden);
    }
    for (; c < dim; c++) {
        float step = g[c] * lr;
        row[c] = row[c] - step / den;
    }
}

#define FBX_ADAGRAD_BLOCK 8 /* rows whose sums of squares run side by side (each in column order) */

/* rows [lo, hi) of fbx_rowwise_adagrad (one thread's share) */
FBX_INLINE void fbx_rowwise_adagrad_rows(float *table, int64_t width, const int64_t dim, const int64_t *slots,
                                         int64_t lo, int64_t hi, const float *grad, float lr, float eps,
                                         uint8_t *dirty) {
    const float fdim = (float)dim;
    for (int64_t j0 = lo; j0 < hi; j0 += FBX_ADAGRAD_BLOCK) {
        const int64_t ahead = j0 + 2 * FBX_ADAGRAD_BLOCK;
        for (int64_t j = ahead; j < ahead + FBX_ADAGRAD_BLOCK && j < hi; j++) {
            float *r = table + slots[j] * width;
            __builtin_prefetch(r, 1); __builtin_prefetch(r + dim, 1);
        }
        const float *g = grad + j0 * dim;
        if (j0 + FBX_ADAGRAD_BLOCK <= hi) {
            /* a full block: the rows' sums side by side (independent chains), then the rows */
            float s[FBX_ADAGRAD_BLOCK];
            for (int r = 0; r < FBX_ADAGRAD_BLOCK; r++) s[r] = 0.0f;
            for (int64_t c = 0; c < dim; c++)
                for (int r = 0; r < FBX_ADAGRAD_BLOCK; r++) {
                    float x = g[r * dim + c];
                    s[r] = s[r] + x * x;
                }
            for (int r = 0; r < FBX_ADAGRAD_BLOCK; r++)
                fbx_adagrad_row(table + slots[j0 + r] * width, table + slots[j0 + r] * width + dim, g + r * dim, dim,
                                s[r], fdim, lr, eps);
        } else {
            for (int64_t j = j0; j < hi; j++) {
                const float *gj = grad + j * dim;
                float s = 0.0f;
                for (int64_t c = 0; c < dim; c++) s = s + gj[c] * gj[c];
                fbx_adagrad_row(table + slots[j] * width, table + slots[j] * width + dim, gj, dim, s, fdim, lr, eps);
            }
        }
        if (dirty)
            for (int64_t j = j0; j < j0 + FBX_ADAGRAD_BLOCK && j < hi; j++) dirty[slots[j]] = 1;
    }
}

/* Row-wise Adagrad in place on the rows table (n_slots rows of `width` floats, the
 * accumulator at column dim): for j < m, with row = table + slots[j] * width and g the
 * gradient row j: s = g[0]^2 + g[1]^2 + ... (in column order), acc = row[dim] + s / dim,
 * row[dim] = acc, den = sqrt(acc) + eps (correctly rounded), row[c] -= (g[c] * lr) / den;
 * dirty[slots[j]] = 1 unless dirty is NULL.  Returns 0, or -1 (nothing done) for a slot
 * outside [0, n_slots).  With nthreads > 1 the slots must be distinct. */
int fbx_rowwise_adagrad(float *table, int64_t n_slots, int64_t width, int64_t dim, const int64_t *slots, int64_t m,
                        const float *grad, float lr, float eps, int nthreads, uint8_t *dirty) {
    for (int64_t j = 0; j < m; j++)
        if (slots[j] < 0 || slots[j] >= n_slots) return -1;
#define FBX_ADAGRAD(D) fbx_rowwise_adagrad_rows(table, width, D, slots, fbx_lo, fbx_hi, grad, lr, eps, dirty)
    FBX_SPLIT_ROWS(m, nthreads, m >= FBX_PAR_ROWS, FBX_BY_DIM(dim, FBX_ADAGRAD));
#undef FBX_ADAGRAD
    return 0;
}

/* SGD in place: row[c] -= grad[j, c] * lr for the rows at slots[j] (dirty as in
 * fbx_rowwise_adagrad).  Returns 0, or -1 (nothing done) for a slot outside [0, n_slots).
 * With nthreads > 1 the slots must be distinct. */
int fbx_sgd(float *table, int64_t n_slots, int64_t width, int64_t dim, const int64_t *slots, int64_t m,
            const float *grad, float lr, int nthreads, uint8_t *dirty) {
    for (int64_t j = 0; j < m; j++)
        if (slots[j] < 0 || slots[j] >= n_slots) return -1;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1 && m >= FBX_PAR_ROWS)
    for (int64_t j = 0; j < m; j++) {
        float *row = table + slots[j] * width;
        const float *g = grad + j * dim;
        for (int64_t c = 0; c < dim; c++) row[c] = row[c] - g[c] * lr;
        if (dirty) dirty[slots[j]] = 1;
    }
    return 0;
}

/* rows [lo, hi) of fbx_gather_cols */
FBX_INLINE void fbx_gather_cols_rows(const float *table, int64_t width, const int64_t *slots, int64_t lo, int64_t hi,
                                     const int64_t ncols, float *out) {
    for (int64_t j = lo; j < hi; j++) {
        if (j + 8 < hi) __builtin_prefetch(table + slots[j + 8] * width);
        /* (a copy of the width's bytes: a column loop of a known width was unrolled into single floats) */
        memcpy(out + j * ncols, table + slots[j] * width, sizeof(float) * (size_t)ncols);
    }
}

/* out[j, 0..ncols) = table[slots[j], 0..ncols) for j < m (a gather of the leading columns).
 * Returns 0, or -1 (nothing done) for a slot outside [0, n_slots). */
int fbx_gather_cols(const float *table, int64_t n_slots, int64_t width, const int64_t *slots, int64_t m,
                    int64_t ncols, float *out, int nthreads) {
    for (int64_t j = 0; j < m; j++)
        if (slots[j] < 0 || slots[j] >= n_slots) return -1;
#define FBX_GATHER(D) fbx_gather_cols_rows(table, width, slots, fbx_lo, fbx_hi, D, out)
    FBX_SPLIT_ROWS(m, nthreads, m >= FBX_PAR_ROWS, FBX_BY_DIM(ncols, FBX_GATHER));
#undef FBX_GATHER
    return 0;
}

/* Bags come field after field: bag b = f * per + i is the i-th bag of field f (fields = 1:
 * one field, per = nbags).  Its pooled row (fbx_bag_sum's output, its backward's gradient)
 * is row i * fields + f: [per][fields][dim], each bag's fields side by side (the layout the
 * dense layers read, no transpose copied); with one field, row b. */
FBX_INLINE void fbx_bag_sum_rows(const float *restrict rows, const int64_t dim, const int64_t *idx,
                                 const int64_t *offsets, int64_t fields, int64_t per, float *restrict out,
                                 int mean, int64_t lo, int64_t hi) {
    if (lo >= hi) return; /* (no bags: per may be 0) */
    int64_t f = lo / per, i = lo % per; /* bags [lo, hi) in order: bag b = f * per + i */
    for (int64_t b = lo; b < hi; b++, i++) {
        if (i == per) { i = 0; f++; }
        float *o = out + (i * fields + f) * dim;
        const int64_t n = offsets[b + 1] - offsets[b];
        const float div = mean && n > 1 ? (float)n : 1.0f;
        if (dim % 4 == 0 && dim <= 4 * FBX_V4_MAX) { /* the bag's sum in registers, 4 columns at a time */
            fbx_v4 acc[FBX_V4_MAX];
            for (int64_t q = 0; q < dim / 4; q++) acc[q] = (fbx_v4){0.0f, 0.0f, 0.0f, 0.0f};
            for (int64_t k = offsets[b]; k < offsets[b + 1]; k++) {
                const float *r = rows + idx[k] * dim;
                for (int64_t q = 0; q < dim / 4; q++) acc[q] += fbx_ld4(r + 4 * q);
            }
            if (div != 1.0f) {
                const fbx_v4 vd = {div, div, div, div};
                for (int64_t q = 0; q < dim / 4; q++) acc[q] = acc[q] / vd;
            }
            for (int64_t q = 0; q < dim / 4; q++) fbx_st4(o + 4 * q, acc[q]);
            continue;
        }
        for (int64_t c = 0; c < dim; c++) o[c] = 0.0f;
        for (int64_t k = offsets[b]; k < offsets[b + 1]; k++) {
            const float *r = rows + idx[k] * dim;
            for (int64_t c = 0; c < dim; c++) o[c] += r[c];
        }
        if (div != 1.0f)
            for (int64_t c = 0; c < dim; c++) o[c] = o[c] / div;
    }
}

/* Whether bags (offsets, nbags + 1 of them) are in order and each index is a row in [0, m):
 * what fbx_bag_sum and its backward check before any work (the caller vouches that offsets[0]
 * and offsets[nbags] lie within idx: hashmap.py checks them) */
static int fbx_bags_sound(const int64_t *idx, const int64_t *offsets, int64_t nbags, int64_t m) {
    for (int64_t b = 0; b < nbags; b++)
        if (offsets[b] > offsets[b + 1]) return 0;
    for (int64_t k = offsets[0]; k < offsets[nbags]; k++)
        if (idx[k] < 0 || idx[k] >= m) return 0;
    return 1;
}

/* Sum-pooled bags: bag b's row of out (fbx_bag_sum_rows: b itself for one field) = rows[idx[k]]
 * summed over k in offsets[b] .. offsets[b + 1] (offsets has nbags + 1 entries), in index
 * order, from zero; with mean, each bag of n > 1 rows then divided by n (a float division, as
 * torch divides).  ``fields`` divides nbags (the caller checks it).  Returns 0, or -1 (nothing
 * done) for an index outside [0, m) or offsets out of order. */
int fbx_bag_sum(const float *rows, int64_t m, int64_t dim, const int64_t *idx, const int64_t *offsets,
                int64_t nbags, int64_t fields, float *out, int mean, int nthreads) {
    if (!fbx_bags_sound(idx, offsets, nbags, m)) return -1;
    const int64_t per = nbags / fields;
#define FBX_BAG_SUM(D) fbx_bag_sum_rows(rows, D, idx, offsets, fields, per, out, mean, fbx_lo, fbx_hi)
    FBX_SPLIT_ROWS(nbags, nthreads, nbags >= FBX_PAR_ROWS / 2, FBX_BY_DIM(dim, FBX_BAG_SUM));
#undef FBX_BAG_SUM
    return 0;
}

FBX_INLINE void fbx_bag_sum_backward_body(const float *restrict grad_out, const int64_t dim, const int64_t *idx,
                                          const int64_t *offsets, int64_t fields, int64_t per, int mean,
                                          float *restrict grad_rows) {
    float scaled[4 * FBX_V4_MAX];
    for (int64_t f = 0; f < fields; f++)
    for (int64_t i = 0; i < per; i++) { /* bag b = f * per + i: the bags in order */
        const int64_t b = f * per + i;
        const float *g = grad_out + (i * fields + f) * dim;
        const int64_t n = offsets[b + 1] - offsets[b];
        if (mean && n > 1 && dim <= 4 * FBX_V4_MAX) { /* the bag's gradient over its size, as torch's division */
            for (int64_t c = 0; c < dim; c++) scaled[c] = g[c] / (float)n;
            g = scaled;
        }
        if (dim % 4 == 0 && dim <= 4 * FBX_V4_MAX) { /* the bag's gradient held in registers */
            fbx_v4 gv[FBX_V4_MAX];
            for (int64_t q = 0; q < dim / 4; q++) gv[q] = fbx_ld4(g + 4 * q);
            for (int64_t k = offsets[b]; k < offsets[b + 1]; k++) {
                float *r = grad_rows + idx[k] * dim;
                for (int64_t q = 0; q < dim / 4; q++) fbx_st4(r + 4 * q, fbx_ld4(r + 4 * q) + gv[q]);
            }
            continue;
        }
        const float div = mean && n > 1 ? (float)n : 1.0f;
        for (int64_t k = offsets[b]; k < offsets[b + 1]; k++) {
            float *r = grad_rows + idx[k] * dim;
            if (div != 1.0f && g != scaled)
                for (int64_t c = 0; c < dim; c++) r[c] += g[c] / div;
            else
                for (int64_t c = 0; c < dim; c++) r[c] += g[c];
        }
    }
}

/* The backward of fbx_bag_sum: grad_rows[r] = sum of bag b's gradient (its row of grad_out, laid
 * out as fbx_bag_sum's output; over its bag's size n when mean and n > 1) over the occurrences
 * k of row r (idx[k] = r, k in bag b), in occurrence order, from zero (grad_rows has m rows).
 * Returns 0, or -1 (nothing done) for an index outside [0, m) or offsets out of order. */
int fbx_bag_sum_backward(const float *grad_out, int64_t dim, const int64_t *idx, const int64_t *offsets,
                         int64_t nbags, int64_t fields, int64_t m, float *grad_rows, int mean) {
    if (!fbx_bags_sound(idx, offsets, nbags, m)) return -1;
    memset(grad_rows, 0, sizeof(float) * (size_t)(m * dim));
    const int64_t per = nbags / fields;
#define FBX_BAG_BACK(D) fbx_bag_sum_backward_body(grad_out, D, idx, offsets, fields, per, mean, grad_rows)
    FBX_BY_DIM(dim, FBX_BAG_BACK)
#undef FBX_BAG_BACK
    return 0;
}

/* ---- the SSD file through a memory map, with SIGBUS turned into an error code ----------
 * The tier reserves its file's blocks with posix_fallocate before mapping them, so a store
 * into the map cannot run out of space; a file truncated behind the map's back makes the
 * next access raise SIGBUS.  fbx_map_copy installs a handler for the duration of one copy
 * (the previous handler, e.g. Python's faulthandler, is restored after it), which jumps
 * back and reports the row; a SIGBUS outside a copy goes to the previous handler. */
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>

static __thread sigjmp_buf *fbx_bus_jump = NULL;
static struct sigaction fbx_bus_previous;

static void fbx_on_sigbus(int sig, siginfo_t *info, void *ctx) {
    if (fbx_bus_jump) siglongjmp(*fbx_bus_jump, 1);
    sigaction(SIGBUS, &fbx_bus_previous, NULL); /* not a copy of ours: the previous handler */
    raise(sig);
    (void)info; (void)ctx;
}

/* Map `bytes` bytes of fd read-write, shared; NULL on failure (errno set). */
void *fbx_map(int fd, int64_t bytes) {
    void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

int fbx_unmap(void *p, int64_t bytes) { return munmap(p, (size_t)bytes) == 0 ? 0 : -errno; }

int fbx_map_sync(void *p, int64_t bytes) { return msync(p, (size_t)bytes, MS_SYNC) == 0 ? 0 : -errno; }

/* Run fn(ctx, &at) with SIGBUS caught: fn keeps `at` at the index of the row it is on.
 * Returns fn's result, 1 + at when a SIGBUS interrupted it (the file was truncated), or
 * -errno when the handler could not be installed. */
typedef int64_t (*fbx_guarded_fn)(void *ctx, volatile int64_t *at);

static int64_t fbx_guarded(fbx_guarded_fn fn, void *ctx) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = fbx_on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &old) != 0) return -(int64_t)errno;
    fbx_bus_previous = old;
    sigjmp_buf jump;
    volatile int64_t at = 0;
    if (sigsetjmp(jump, 1)) {
        fbx_bus_jump = NULL;
        sigaction(SIGBUS, &old, NULL);
        return 1 + at;
    }
    fbx_bus_jump = &jump;
    int64_t rc = fn(ctx, &at);
    fbx_bus_jump = NULL;
    sigaction(SIGBUS, &old, NULL);
    return rc;
}

typedef struct {
    char *base; const int64_t *g; int64_t n, row_bytes; char *buf; int to_map;
} fbx_copy_args;

static int64_t fbx_copy_rows(void *ctx, volatile int64_t *at) {
    const fbx_copy_args *c = (const fbx_copy_args *)ctx;
    for (int64_t j = 0; j < c->n; j++) {
        *at = j;
        char *row = c->base + c->g[j] * c->row_bytes;
        if (j + 8 < c->n) __builtin_prefetch(c->base + c->g[j + 8] * c->row_bytes);
        if (c->to_map) memcpy(row, c->buf + j * c->row_bytes, (size_t)c->row_bytes);
        else memcpy(c->buf + j * c->row_bytes, row, (size_t)c->row_bytes);
    }
    return 0;
}

/* Copy rows g[0..n) between the map (row r at base + r * row_bytes) and buf (n rows):
 * to_map = 0 reads them into buf, 1 writes buf into them.  Returns 0, or 1 + j when row
 * g[j] could not be accessed (the file was truncated: SIGBUS). */
int64_t fbx_map_copy(char *base, const int64_t *g, int64_t n, int64_t row_bytes, char *buf, int to_map) {
    fbx_copy_args c = {base, g, n, row_bytes, buf, to_map};
    return fbx_guarded(fbx_copy_rows, &c);
}

/* The SSD tier's row hashes (fbrapids.trainers.sparse.ssd): for row i of n rows of `width`
 * 32-bit words w at global row g[i], two 32-bit sums a = sum_j w[j] * (((j + 1) * 0x9E3779B1) | 1) and
 * b = sum_j w[j] * (((j + 1) * 0x85EBCA77) | 1) (mod 2^32; odd multipliers: any change of one word
 * changes both), out[i] = (b * 2^32 + a) * (2 g[i] + 1) mod 2^64.  32-bit lanes, so that the loop
 * vectorises.  A page's checksum is the sum of its rows' hashes. */
/* the multipliers of fbx_row_hashes for `width` words */
static void fbx_hash_multipliers(int64_t width, uint32_t *m1, uint32_t *m2) {
    for (int64_t j = 0; j < width; j++) {
        m1[j] = ((uint32_t)(j + 1) * 0x9E3779B1u) | 1u;
        m2[j] = ((uint32_t)(j + 1) * 0x85EBCA77u) | 1u;
    }
}

static inline uint64_t fbx_row_hash(const uint32_t *w, int64_t width, int64_t g, const uint32_t *m1,
                                    const uint32_t *m2) {
    uint32_t a = 0, b = 0;
    for (int64_t j = 0; j < width; j++) {
        a += w[j] * m1[j];
        b += w[j] * m2[j];
    }
    return ((((uint64_t)b) << 32) | a) * (2ULL * (uint64_t)g + 1ULL);
}

void fbx_row_hashes(const uint32_t *words, const int64_t *g, int64_t n, int64_t width, uint64_t *out) {
    uint32_t m1[width > 0 ? width : 1], m2[width > 0 ? width : 1];
    fbx_hash_multipliers(width, m1, m2);
    for (int64_t i = 0; i < n; i++) out[i] = fbx_row_hash(words + i * width, width, g[i], m1, m2);
}

typedef struct {
    const char *base; const int64_t *g; int64_t n, width, page_rows; const uint64_t *page_sums; float *out;
    int64_t *report; const uint32_t *m1, *m2;
} fbx_checked_args;

static int64_t fbx_read_checked_rows(void *ctx, volatile int64_t *at) {
    const fbx_checked_args *c = (const fbx_checked_args *)ctx;
    const int64_t row_bytes = c->width * 4, pr = c->page_rows;
    int64_t pages = 0, bad = 0, first_bad = -1;
    for (int64_t j = 0; j < c->n;) {
        *at = j;
        const int64_t p = c->g[j] / pr;
        int64_t k = j; /* the rows of the next page read: prefetch its start */
        while (k < c->n && c->g[k] / pr == p) k++;
        if (k < c->n) {
            const char *next = c->base + (c->g[k] / pr) * pr * row_bytes;
            for (int64_t off = 0; off < pr * row_bytes; off += 64) __builtin_prefetch(next + off);
        }
        uint64_t sum = 0;
        for (int64_t r = p * pr; r < (p + 1) * pr; r++)
            sum += fbx_row_hash((const uint32_t *)(c->base + r * row_bytes), c->width, r, c->m1, c->m2);
        if (sum != c->page_sums[p]) { bad++; if (first_bad < 0) first_bad = p; }
        pages++;
        for (; j < k; j++) memcpy(c->out + j * c->width, c->base + c->g[j] * row_bytes, (size_t)row_bytes);
    }
    c->report[0] = pages; c->report[1] = bad; c->report[2] = first_bad;
    return 0;
}

/* The SSD tier's checked read in one pass over the map: rows g[0..n) (ascending, distinct)
 * of `width` words each are copied into out, and every page of page_rows rows they touch is
 * hashed where it lies (fbx_row_hashes' hashes summed) and compared with page_sums[page].
 * report[0..3) = pages checked, pages whose sum differs, the first of those (-1: none).
 * Returns 0, or 1 + j when the page of row g[j] could not be accessed (SIGBUS). */
int64_t fbx_map_read_checked(const char *base, const int64_t *g, int64_t n, int64_t width, int64_t page_rows,
                             const uint64_t *page_sums, float *out, int64_t *report) {
    uint32_t m1[width > 0 ? width : 1], m2[width > 0 ? width : 1];
    fbx_hash_multipliers(width, m1, m2);
    fbx_checked_args c = {base, g, n, width, page_rows, page_sums, out, report, m1, m2};
    return fbx_guarded(fbx_read_checked_rows, &c);
}

typedef struct {
    char *base; const int64_t *g; int64_t n, width, page_rows, written_end; const float *rows; uint64_t *page_sums;
    const uint32_t *m1, *m2;
} fbx_write_args;

static int64_t fbx_write_checked_rows(void *ctx, volatile int64_t *at) {
    const fbx_write_args *c = (const fbx_write_args *)ctx;
    const int64_t row_bytes = c->width * 4;
    for (int64_t j = 0; j < c->n; j++) {
        *at = j;
        const int64_t r = c->g[j];
        char *dst = c->base + r * row_bytes;
        if (j + 8 < c->n) __builtin_prefetch(c->base + c->g[j + 8] * row_bytes, 1);
        const uint32_t *src = (const uint32_t *)(c->rows + j * c->width);
        uint64_t delta = fbx_row_hash(src, c->width, r, c->m1, c->m2);
        if (r < c->written_end) delta -= fbx_row_hash((const uint32_t *)dst, c->width, r, c->m1, c->m2);
        c->page_sums[r / c->page_rows] += delta;
        memcpy(dst, src, (size_t)row_bytes);
    }
    return 0;
}

/* The SSD tier's checked write in one pass over the map: row j of rows (n rows of `width`
 * words) goes to global row g[j] (distinct), and its page's checksum page_sums[g[j] /
 * page_rows] moves by the new row's hash minus the old one's (rows from written_end on hold
 * zeros, whose hash is 0).  Returns 0, or 1 + j when row g[j] could not be accessed (SIGBUS;
 * the rows before it are written and counted). */
int64_t fbx_map_write_checked(char *base, const int64_t *g, int64_t n, int64_t width, int64_t page_rows,
                              int64_t written_end, const float *rows, uint64_t *page_sums) {
    uint32_t m1[width > 0 ? width : 1], m2[width > 0 ? width : 1];
    fbx_hash_multipliers(width, m1, m2);
    fbx_write_args c = {base, g, n, width, page_rows, written_end, rows, page_sums, m1, m2};
    return fbx_guarded(fbx_write_checked_rows, &c);
}

int fbx_rowwise_adagrad_sliced(float *table, int64_t n_slots, int64_t width, int64_t dim, int64_t slices,
                               const int64_t *slots, int64_t m, const float *grad, float lr, float eps, int nthreads,
                               uint8_t *dirty);

/* fbx_rowwise_adagrad over several tables in one call: table t's rows table, its slot count,
 * its width, its slots, their number, its gradient rows, its dirty flags, its dim (a slice's)
 * and its slices are the words desc[t * FBX_AG_WORDS + k] (k: FBX_AG_*), its lr and eps
 * hyper[2 t], hyper[2 t + 1]; a table of several slices is fbx_rowwise_adagrad_sliced's; its
 * result goes to ret[t].  progress (or NULL): set to t + 1 once table t is done (an atomic
 * store with release order), for fbx_lookup_tables to read each table as soon as it is. */
enum { FBX_AG_TABLE, FBX_AG_N_SLOTS, FBX_AG_WIDTH, FBX_AG_SLOTS, FBX_AG_M, FBX_AG_GRAD, FBX_AG_DIRTY, FBX_AG_DIM,
       FBX_AG_SLICES, FBX_AG_WORDS };

void fbx_rowwise_adagrad_tables(const int64_t *desc, const float *hyper, int64_t n, int *ret, int nthreads,
                                int64_t *progress) {
    for (int64_t t = 0; t < n; t++) {
        const int64_t *w = desc + t * FBX_AG_WORDS;
        if (w[FBX_AG_SLICES] > 1)
            ret[t] = fbx_rowwise_adagrad_sliced((float *)w[FBX_AG_TABLE], w[FBX_AG_N_SLOTS], w[FBX_AG_WIDTH],
                                                w[FBX_AG_DIM], w[FBX_AG_SLICES], (const int64_t *)w[FBX_AG_SLOTS],
                                                w[FBX_AG_M], (const float *)w[FBX_AG_GRAD], hyper[2 * t],
                                                hyper[2 * t + 1], nthreads, (uint8_t *)w[FBX_AG_DIRTY]);
        else
            ret[t] = fbx_rowwise_adagrad((float *)w[FBX_AG_TABLE], w[FBX_AG_N_SLOTS], w[FBX_AG_WIDTH], w[FBX_AG_DIM],
                                         (const int64_t *)w[FBX_AG_SLOTS], w[FBX_AG_M], (const float *)w[FBX_AG_GRAD],
                                         hyper[2 * t], hyper[2 * t + 1], nthreads, (uint8_t *)w[FBX_AG_DIRTY]);
        if (progress) /* tables t and before are done: a lookup pass waiting on another thread may read them */
            __atomic_store_n(progress, t + 1, __ATOMIC_RELEASE);
    }
}

/* fbx_rowwise_adagrad on rows that hold `slices` vectors side by side (a trial's arms sharing
 * a table): row = table + slots[j] * width holds slice k's embedding at columns
 * [k * dim, (k + 1) * dim) and its accumulator at column slices * dim + k; grad row j holds
 * slice k's gradient at [k * dim, (k + 1) * dim).  Each slice is updated as fbx_rowwise_adagrad
 * updates a row of its own (its sum in column order, the same arithmetic: the same bits).
 * Returns 0, or -1 (nothing done) for a slot outside [0, n_slots).  With nthreads > 1 the
 * slots must be distinct. */
/* rows [lo, hi) of fbx_rowwise_adagrad_sliced */
FBX_INLINE void fbx_rowwise_adagrad_sliced_rows(float *table, int64_t width, const int64_t dim, int64_t slices,
                                                const int64_t *slots, int64_t lo, int64_t hi, const float *grad,
                                                float lr, float eps, uint8_t *dirty) {
    const float fdim = (float)dim;
    const int64_t emb = dim * slices;
    for (int64_t j = lo; j < hi; j++) {
        float *row = table + slots[j] * width;
        if (j + 4 < hi) { /* the whole row four ahead: it spans several cache lines */
            const float *ahead = table + slots[j + 4] * width;
            for (int64_t c = 0; c < width; c += 16) __builtin_prefetch(ahead + c, 1);
        }
        for (int64_t k = 0; k < slices; k++) {
            const float *g = grad + j * emb + k * dim;
            float s = 0.0f;
            for (int64_t c = 0; c < dim; c++) s = s + g[c] * g[c];
            fbx_adagrad_row(row + k * dim, row + emb + k, g, dim, s, fdim, lr, eps);
        }
        if (dirty) dirty[slots[j]] = 1;
    }
}

int fbx_rowwise_adagrad_sliced(float *table, int64_t n_slots, int64_t width, int64_t dim, int64_t slices,
                               const int64_t *slots, int64_t m, const float *grad, float lr, float eps, int nthreads,
                               uint8_t *dirty) {
    for (int64_t j = 0; j < m; j++)
        if (slots[j] < 0 || slots[j] >= n_slots) return -1;
    /* instantiated by slice width (FBX_BY_DIM): the column loops unrolled and in vector
     * lanes, four columns a division instead of one (measured: 52k rows of 9 slices of 16,
     * one thread, 14.1 ms -> 5.1 ms), the same bits */
#define FBX_ADAGRAD_SLICED(D) \
    fbx_rowwise_adagrad_sliced_rows(table, width, D, slices, slots, fbx_lo, fbx_hi, grad, lr, eps, dirty)
    FBX_SPLIT_ROWS(m, nthreads, m >= FBX_PAR_ROWS, FBX_BY_DIM(dim, FBX_ADAGRAD_SLICED));
#undef FBX_ADAGRAD_SLICED
    return 0;
}

