/* A trial's arms' pooled bags from their shared stores, and the backward, in C
 * (fbrapids/trainers/sparse/arms_bags.py).
 *
 * A shared store's row holds one vector per member arm (its slice, dim columns each), so a
 * row is members * dim wide.  An entry is one feature of one shared store: its bags (ids as
 * positions in the store's rows of the batch, offsets), its feature's position in the
 * collection, the arms its slices belong to.  The forward writes every arm's bags straight
 * into their place in its arm's [bag][feature][:] block (the layout the arms' dense parts
 * read); the backward adds each arm's bag gradients into its slice of the rows' gradient.
 *
 * Each column's arithmetic is that of fbx_bag_sum / fbx_bag_sum_backward (rows.c): a bag's
 * rows summed in index order from zero, divided by its size n when mean and n > 1; a row's
 * gradient summed over its occurrences in entry, bag, index order from zero, each the bag's
 * gradient over n.  So an arm's bags and rows' gradient are the bits its model alone gives.
 */
/* (one translation unit with hashmap.c and rows.c: FBX_PAR_ROWS, FBX_INLINE, FBX_BY_DIM are theirs) */

/* the int64 words of an entry (arms_bags.py: ENTRY_WORDS) */
enum {
    FBX_AB_ROWS,     /* float: the store's rows of this batch, row r at ROWS + at(r) * STRIDE (below) */
    FBX_AB_NROWS,    /* the batch's rows (the ids' positions and the gradient's rows) */
    FBX_AB_WIDTH,    /* members * dim */
    FBX_AB_IDX,      /* int64 [nids]: positions in rows */
    FBX_AB_NIDS,
    FBX_AB_OFFS,     /* int64 [nbags]: bag b is idx[offs[b] .. offs[b + 1]) (the last ends at nids) */
    FBX_AB_FEATURE,  /* its place among the collection's features */
    FBX_AB_MEMBERS,  /* int64 [width / dim]: the arm of each slice */
    FBX_AB_GRAD,     /* float [nrows][width]: the rows' gradient (backward: written, its contents not read) */
    FBX_AB_ROWMAP,   /* int64 [nrows]: at(r) = rowmap[r], the row's place in ROWS (the store's cache table,
                        read where its rows lie, no copy; -1: the default row, zeros, as a lookup gathers it for
                        an id never admitted); 0: at(r) = r (the rows gathered, one after another) */
    FBX_AB_STRIDE,   /* floats from one row of ROWS to the next (>= WIDTH) */
    FBX_AB_NSTORED,  /* rows in ROWS (every at(r) below it) */
    FBX_AB_WORDS
};

#define FBX_AB_MAXD 256 /* the widest slice (arms_bags.py: MAX_DIM) */

/* the default row's slice: what a lookup gathers for an id never admitted */
static const float fbx_ab_zeros[FBX_AB_MAXD];

/* the batch's row r in ROWS, or NULL for the default row (rowmap -1) */
static inline const float *fbx_ab_row(const int64_t *w, int64_t r) {
    const int64_t *rowmap = (const int64_t *)(intptr_t)w[FBX_AB_ROWMAP];
    const int64_t at = rowmap ? rowmap[r] : r;
    return at < 0 ? NULL : (const float *)(intptr_t)w[FBX_AB_ROWS] + at * w[FBX_AB_STRIDE];
}

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define FBX_AB_AHEAD 8   /* the rows of the bag this many ahead are fetched while one is pooled */

static inline int64_t fbx_ab_end(const int64_t *e, int64_t b, int64_t nbags) {
    const int64_t *offs = (const int64_t *)(intptr_t)e[FBX_AB_OFFS];
    return b + 1 < nbags ? offs[b + 1] : e[FBX_AB_NIDS];
}

/* Check every entry before any work: 0, or -(e + 1) for the first entry e that is not sound
 * (its width not its members' dims, an arm or feature out of range, offsets out of order or
 * outside its ids, an index outside its rows). */
int64_t fbx_arms_bags_check(const int64_t *desc, int64_t n_entries, int64_t nbags, int64_t nfeat, int64_t dim,
                            int64_t n_arms) {
    for (int64_t e = 0; e < n_entries; e++) {
        const int64_t *w = desc + e * FBX_AB_WORDS;
        const int64_t width = w[FBX_AB_WIDTH], nids = w[FBX_AB_NIDS], nrows = w[FBX_AB_NROWS];
        const int64_t *idx = (const int64_t *)(intptr_t)w[FBX_AB_IDX];
        const int64_t *offs = (const int64_t *)(intptr_t)w[FBX_AB_OFFS];
        const int64_t *members = (const int64_t *)(intptr_t)w[FBX_AB_MEMBERS];
        if (dim <= 0 || width <= 0 || width % dim != 0 || w[FBX_AB_STRIDE] < width) return -(e + 1);
        const int64_t *rowmap = (const int64_t *)(intptr_t)w[FBX_AB_ROWMAP];
        if (!rowmap && nrows > w[FBX_AB_NSTORED]) return -(e + 1);
        if (rowmap)
            for (int64_t r = 0; r < nrows; r++)
                if (rowmap[r] < -1 || rowmap[r] >= w[FBX_AB_NSTORED]) return -(e + 1);
        if (w[FBX_AB_FEATURE] < 0 || w[FBX_AB_FEATURE] >= nfeat) return -(e + 1);
        for (int64_t j = 0; j < width / dim; j++)
            if (members[j] < 0 || members[j] >= n_arms) return -(e + 1);
        if (nbags > 0 && offs[0] < 0) return -(e + 1);
        for (int64_t b = 0; b < nbags; b++)
            if (offs[b] > fbx_ab_end(w, b, nbags) || fbx_ab_end(w, b, nbags) > nids) return -(e + 1);
        for (int64_t k = 0; k < nids; k++)
            if (idx[k] < 0 || idx[k] >= nrows) return -(e + 1);
    }
    return 0;
}

/* a bag's dim floats written to its arm's block.  The arms' blocks are many (one per arm)
 * and written once, read by the dense parts only after the whole pass: with SSE2 and
 * aligned rows the stores go around the cache (non-temporal; fbx_arms_bags fences them),
 * so the write of a line does not first read it in, nor evict the rows being pooled */
static inline void fbx_ab_store(float *dst, const float *src, int64_t dim) {
#if defined(__SSE2__)
    if (dim % 4 == 0 && ((uintptr_t)dst & 15) == 0) {
        for (int64_t c = 0; c < dim; c += 4) _mm_stream_ps(dst + c, _mm_loadu_ps(src + c));
        return;
    }
#endif
    memcpy(dst, src, sizeof(float) * (size_t)dim);
}

/* one bag of an entry: each slice's sum, written at its arm's place */
FBX_INLINE void fbx_arms_bag(const int64_t *w, int64_t b, int64_t nbags, const int64_t dim, const int64_t *outs,
                             int64_t stride_b, int64_t stride_f, int mean) {
    const int64_t width = w[FBX_AB_WIDTH], f = w[FBX_AB_FEATURE];
    const int64_t *idx = (const int64_t *)(intptr_t)w[FBX_AB_IDX];
    const int64_t *members = (const int64_t *)(intptr_t)w[FBX_AB_MEMBERS];
    const int64_t k0 = ((const int64_t *)(intptr_t)w[FBX_AB_OFFS])[b], k1 = fbx_ab_end(w, b, nbags);
    const int64_t n = k1 - k0;
    const float div = mean && n > 1 ? (float)n : 1.0f;
    if (b + FBX_AB_AHEAD < nbags) { /* the rows of the entry's bag ahead into the cache: they lie anywhere */
        const int64_t a0 = ((const int64_t *)(intptr_t)w[FBX_AB_OFFS])[b + FBX_AB_AHEAD];
        const int64_t a1 = fbx_ab_end(w, b + FBX_AB_AHEAD, nbags);
        for (int64_t k = a0; k < a1; k++) {
            const float *row = fbx_ab_row(w, idx[k]);
            if (row)
                for (int64_t c = 0; c < width; c += 16) __builtin_prefetch(row + c);
        }
    }
    for (int64_t j = 0; j < width / dim; j++) {
        float *o = (float *)(intptr_t)outs[members[j]];
        if (!o) continue;
        float acc[FBX_AB_MAXD]; /* the sum in registers (dim known to the compiler: its lanes), stored once */
        for (int64_t c = 0; c < dim; c++) acc[c] = 0.0f;
        for (int64_t k = k0; k < k1; k++) {
            const float *row = fbx_ab_row(w, idx[k]), *r = row ? row + j * dim : fbx_ab_zeros;
            for (int64_t c = 0; c < dim; c++) acc[c] += r[c];
        }
        if (div != 1.0f)
            for (int64_t c = 0; c < dim; c++) acc[c] = acc[c] / div;
        fbx_ab_store(o + b * stride_b + f * stride_f, acc, dim);
    }
}

/* the loops below compiled for AVX-512, AVX2 and the baseline (gcc's target_clones on x86-64: the
 * loader picks the machine's best): a slice's sums run in as many lanes as it has columns.  Each
 * float's arithmetic is the same on every clone (additions and divisions, element by element; no
 * fused multiply-add) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FBX_AB_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default"), optimize("fp-contract=off")))
#else
#define FBX_AB_CLONES
#endif
/* bags i0 .. i1 of fbx_arms_bags' order (bag after bag, each bag's entries in turn) */
FBX_AB_CLONES static void fbx_arms_bags_span(const int64_t *desc, int64_t n_entries, int64_t i0, int64_t i1, int64_t nbags,
                                             int64_t dim, const int64_t *outs, int64_t stride_b, int64_t stride_f, int mean) {
    for (int64_t i = i0; i < i1; i++) { /* bag after bag, each bag's entries in turn: an arm's bags are written in order */
#define FBX_ARMS_BAG(D) fbx_arms_bag(desc + (i % n_entries) * FBX_AB_WORDS, i / n_entries, nbags, D, outs, stride_b, stride_f, mean)
        FBX_BY_DIM(dim, FBX_ARMS_BAG)
#undef FBX_ARMS_BAG
    }
}

/* Every entry's bags, each slice at its arm's place: outs[a] + b * stride_b + f * stride_f
 * (dim contiguous floats; a null outs[a]: arm a's bags are not wanted).  Returns
 * fbx_arms_bags_check's code (nothing written unless 0). */
int64_t fbx_arms_bags(const int64_t *desc, int64_t n_entries, int64_t nbags, int64_t nfeat, int64_t dim,
                      int64_t n_arms, const int64_t *outs, int64_t stride_b, int64_t stride_f, int mean, int nthreads) {
    if (dim > FBX_AB_MAXD) return -1; /* (arms_bags.py refuses it first) */
    const int64_t bad = fbx_arms_bags_check(desc, n_entries, nbags, nfeat, dim, n_arms);
    if (bad) return bad;
    const int64_t total = n_entries * nbags;
    /* dynamic: a list feature's bags cost many times a single id's */
#pragma omp parallel num_threads(nthreads) if (nthreads > 1 && total >= FBX_PAR_ROWS / 2)
    {
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t i0 = 0; i0 < total; i0 += 256)
            fbx_arms_bags_span(desc, n_entries, i0, i0 + 256 < total ? i0 + 256 : total, nbags, dim, outs, stride_b, stride_f, mean);
#if defined(__SSE2__)
        _mm_sfence(); /* each thread's non-temporal stores (fbx_ab_store) done before the region's end: the caller reads the blocks */
#endif
    }
    return 0;
}

/* entry w's bags' gradients added into its rows' gradient, every slice of a row in one visit
 * (slice j from arm members[j]'s gradients, over the bag's size when mean and n > 1): bag
 * after bag, each occurrence's whole row written at once, so a row's slices share its
 * cache lines rather than one pass per arm each touching a slice of them */
FBX_INLINE void fbx_arms_entry_back(const int64_t *w, const int64_t *grads, int64_t nbags, const int64_t dim,
                                    int64_t stride_b, int64_t stride_f, int mean, uint8_t *seen) {
    const int64_t width = w[FBX_AB_WIDTH], f = w[FBX_AB_FEATURE], nsl = width / dim;
    const int64_t *idx = (const int64_t *)(intptr_t)w[FBX_AB_IDX];
    const int64_t *offs = (const int64_t *)(intptr_t)w[FBX_AB_OFFS];
    const int64_t *members = (const int64_t *)(intptr_t)w[FBX_AB_MEMBERS];
    float *grad = (float *)(intptr_t)w[FBX_AB_GRAD];
    for (int64_t b = 0; b < nbags; b++) {
        const int64_t k0 = offs[b], k1 = fbx_ab_end(w, b, nbags), n = k1 - k0;
        if (b + FBX_AB_AHEAD < nbags) /* the rows of a bag ahead into the cache: they lie anywhere */
            for (int64_t k = offs[b + FBX_AB_AHEAD]; k < fbx_ab_end(w, b + FBX_AB_AHEAD, nbags); k++)
                for (int64_t c = 0; c < width; c += 16) __builtin_prefetch(grad + idx[k] * width + c, 1);
        const int64_t at = b * stride_b + f * stride_f;
        if (b + FBX_AB_AHEAD < nbags) /* and the arms' gradients of that bag: a block per arm, read across */
            for (int64_t j = 0; j < nsl; j++) {
                const float *ga = (const float *)(intptr_t)grads[members[j]];
                if (ga) __builtin_prefetch(ga + at + FBX_AB_AHEAD * stride_b);
            }
        for (int64_t k = k0; k < k1; k++) {
            float *r = grad + idx[k] * width;
            if (seen && !seen[idx[k]]) { /* the row's first occurrence: its sums start from zero here, in the cache */
                memset(r, 0, sizeof(float) * (size_t)width);
                seen[idx[k]] = 1;
            }
            for (int64_t j = 0; j < nsl; j++, r += dim) {
                const float *ga = (const float *)(intptr_t)grads[members[j]];
                if (!ga) continue;
                const float *g = ga + at;
                float gb[FBX_AB_MAXD]; /* what the row gets (dim known to the compiler: its lanes) */
                if (mean && n > 1) {
                    const float fn = (float)n;
                    for (int64_t c = 0; c < dim; c++) gb[c] = g[c] / fn;
                } else {
                    for (int64_t c = 0; c < dim; c++) gb[c] = g[c];
                }
                for (int64_t c = 0; c < dim; c++) r[c] += gb[c];
            }
        }
    }
}

/* one store's rows' gradient (its first entry `first`; a later entry of a store does nothing):
 * fbx_arms_bags_backward's unit of work */
FBX_AB_CLONES static void fbx_arms_store_back(const int64_t *desc, int64_t n_entries, int64_t first, int64_t nbags,
                                              int64_t dim, const int64_t *grads, int64_t stride_b, int64_t stride_f,
                                              int mean) {
    const int64_t into = desc[first * FBX_AB_WORDS + FBX_AB_GRAD];
    int64_t seen = 0;
    for (int64_t e = 0; e < first && !seen; e++) seen = desc[e * FBX_AB_WORDS + FBX_AB_GRAD] == into;
    if (seen) return; /* a unit is a store: its first entry takes its entries */
    const int64_t *fw = desc + first * FBX_AB_WORDS, nrows = fw[FBX_AB_NROWS], width = fw[FBX_AB_WIDTH];
    float *grad = (float *)(intptr_t)into;
    uint8_t *touched = calloc((size_t)(nrows > 0 ? nrows : 1), 1); /* the rows whose sums have started */
    if (!touched) /* (no room for the flags: every row zeroed first) */
        memset(grad, 0, sizeof(float) * (size_t)(nrows * width));
    for (int64_t e = first; e < n_entries; e++) {
        const int64_t *w = desc + e * FBX_AB_WORDS;
        if (w[FBX_AB_GRAD] != into) continue;
#define FBX_ARMS_BACK(D) fbx_arms_entry_back(w, grads, nbags, D, stride_b, stride_f, mean, touched)
        FBX_BY_DIM(dim, FBX_ARMS_BACK)
#undef FBX_ARMS_BACK
    }
    for (int64_t r = 0; touched && r < nrows; r++) /* rows no bag read: no gradient */
        if (!touched[r]) memset(grad + r * width, 0, sizeof(float) * (size_t)width);
    free(touched);
}

/* The backward: each entry's rows' gradient (FBX_AB_GRAD, written: a store's rows are set to
 * 0 at their first occurrence, where the sums start, and those no bag reads at the end, so
 * the caller need not zero the buffer, a pass over all of it before this one) is, for each
 * of its slices j (arm a = members[j]), the gradient of a's bags, grads[a] + b * stride_b +
 * f * stride_f (dim contiguous floats; a null grads[a]: no gradient reached arm a), over
 * the bag's size when mean.  The work is split over the threads by store (entries adding
 * into one gradient): a store's rows are one thread's, so no two threads write one float,
 * and each float's sum runs over its occurrences in entry, bag, index order, from zero, for
 * any thread count (fbx_bag_sum_backward's order: an arm's slice gets the bits its model
 * alone gets).  Returns fbx_arms_bags_check's code (nothing written unless 0). */
int64_t fbx_arms_bags_backward(const int64_t *desc, int64_t n_entries, int64_t nbags, int64_t nfeat, int64_t dim,
                               int64_t n_arms, const int64_t *grads, int64_t stride_b, int64_t stride_f, int mean,
                               int nthreads) {
    if (dim > FBX_AB_MAXD) return -1; /* (arms_bags.py refuses it first) */
    const int64_t bad = fbx_arms_bags_check(desc, n_entries, nbags, nfeat, dim, n_arms);
    if (bad) return bad;
    const int64_t work = n_entries * nbags;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads) if (nthreads > 1 && work >= FBX_PAR_ROWS / 2)
    for (int64_t first = 0; first < n_entries; first++)
        fbx_arms_store_back(desc, n_entries, first, nbags, dim, grads, stride_b, stride_f, mean);
    return 0;
}
