/* Open-addressing hash map from raw uint64 keys to int64 values, for the embedding store.
 *
 * Linear probing over a power-of-two table, a separate occupancy byte per slot so that
 * every 64-bit key (0 and ~0 included) is a valid key, load factor kept under 1/2 by
 * doubling.  Entries are never deleted: the store maps every id it ever admitted to a
 * global row number, and counts sightings of ids awaiting admission.
 * All entry points take whole arrays, so Python makes one call per batch.
 */
#include <omp.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct { /* one bucket: key and value side by side, so a probe touches one cache line */
    uint64_t key;
    int64_t val; /* FBX_EMPTY: a free bucket (the one value a key cannot map to) */
} fbx_entry;

typedef struct { /* a bucket of the per-batch scratch table: free unless gen is the batch's */
    uint64_t key;
    uint32_t gen;
    uint32_t idx; /* position of key among the batch's distinct keys */
} fbx_seen;

typedef struct {
    fbx_entry *e;
    int64_t cap;   /* power of two */
    int64_t size;
    fbx_seen *seen; /* scratch of fbx_unique_get, kept between batches (no clearing: generations) */
    int64_t seen_cap;
    uint32_t gen;
    fbx_entry *next;    /* the 2 cap buckets of the next growth, made ahead (fbx_ready_ahead), or NULL */
    int64_t next_ready; /* of which next[0 .. next_ready) are marked free already */
} fbx_hashmap;

#define FBX_EMPTY INT64_MIN

static inline uint64_t fbx_mix64(uint64_t x) { /* splitmix64 finaliser */
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static fbx_entry *fbx_alloc_entries(int64_t cap) {
    fbx_entry *e = (fbx_entry *)malloc(sizeof(fbx_entry) * cap);
    if (!e) return NULL;
    for (int64_t i = 0; i < cap; i++) e[i].val = FBX_EMPTY;
    return e;
}

/* most buckets a map may have: its size in bytes fits 62 bits */
#define FBX_MAX_BUCKETS ((int64_t)1 << (62 - 4))

fbx_hashmap *fbx_hm_new(int64_t capacity) {
    if (capacity < 0 || capacity > FBX_MAX_BUCKETS / 2) return NULL;
    int64_t cap = 16;
    while (cap < 2 * capacity) cap <<= 1;
    fbx_hashmap *h = (fbx_hashmap *)calloc(1, sizeof(fbx_hashmap));
    if (!h) return NULL;
    h->e = fbx_alloc_entries(cap);
    if (!h->e) { free(h); return NULL; }
    h->cap = cap;
    return h;
}

void fbx_hm_free(fbx_hashmap *h) {
    if (!h) return;
    free(h->e); free(h->seen); free(h->next); free(h);
}

int64_t fbx_hm_size(const fbx_hashmap *h) { return h->size; }

#define FBX_AHEAD 8 /* rows prefetched ahead in the passes over a batch's rows */

/* Row loops split over `nthreads` OpenMP threads (the caller passes torch's intra-op count)
 * when a batch has at least FBX_PAR_ROWS rows (bags: FBX_PAR_ROWS / 2): under that, waking
 * the other threads costs about what they save (a batch of 16k ids, ~7k distinct rows, ran
 * slower on 2 threads than on 1).  Each row is computed by one thread with the same
 * arithmetic, so the result is the same bits for any thread count. */
#define FBX_PAR_ROWS 8192

/* FBX_SPLIT_ROWS(n, nthreads, par, STMT): STMT run over rows [fbx_lo, fbx_hi): once over [0, n),
 * or, with nthreads > 1 and par, by each of nthreads OpenMP threads over its contiguous share.
 * A row loop's body is an always-inlined function instantiated by width (FBX_BY_DIM, rows.c)
 * inside STMT.  Not an omp for inside that body: gcc outlines an OpenMP region where it is
 * written, before inlining, so every width's instance called one outlined loop with the width
 * a variable (its sums spilled to the stack: fbx_bag_sum took 780 us for 53k one-id bags of
 * 16 columns, 3x a loop of the width's own); here the region holds the dispatch on the width
 * and each instance of the body is inlined into it. */
#define FBX_SPLIT_ROWS(n, nthreads, par, STMT) \
    do { \
        const int64_t fbx_n = (n); \
        const int fbx_threads = (nthreads); \
        if (fbx_threads > 1 && (par)) { \
            _Pragma("omp parallel num_threads(fbx_threads)") \
            { \
                const int64_t fbx_t = omp_get_thread_num(), fbx_nt = omp_get_num_threads(); \
                const int64_t fbx_lo = fbx_n * fbx_t / fbx_nt, fbx_hi = fbx_n * (fbx_t + 1) / fbx_nt; \
                STMT; \
            } \
        } else { \
            const int64_t fbx_lo = 0, fbx_hi = fbx_n; \
            STMT; \
        } \
    } while (0)
#define FBX_PROBE_AHEAD 16 /* keys whose bucket is prefetched ahead in the passes over a batch's keys */

static inline void fbx_prefetch_probe(const fbx_hashmap *h, uint64_t key) {
    __builtin_prefetch(h->e + (int64_t)(fbx_mix64(key) & (uint64_t)(h->cap - 1)));
}

/* bucket holding key, or the free bucket where it would go */
static inline int64_t fbx_find(const fbx_entry *e, int64_t cap, uint64_t key) {
    int64_t mask = cap - 1;
    int64_t i = (int64_t)(fbx_mix64(key) & (uint64_t)mask);
    while (e[i].val != FBX_EMPTY && e[i].key != key) i = (i + 1) & mask;
    return i;
}

static int fbx_grow(fbx_hashmap *h) {
    if (h->cap >= FBX_MAX_BUCKETS) return -1;
    int64_t cap = h->cap * 2;
    fbx_entry *n = h->next; /* made ahead: only its buckets not yet marked free are marked now */
    if (n) {
        for (int64_t i = h->next_ready; i < cap; i++) n[i].val = FBX_EMPTY;
        h->next = NULL; h->next_ready = 0;
    } else {
        n = fbx_alloc_entries(cap);
    }
    if (!n) return -1;
    for (int64_t i = 0; i < h->cap; i++) {
        if (h->e[i].val == FBX_EMPTY) continue;
        n[fbx_find(n, cap, h->e[i].key)] = h->e[i];
    }
    free(h->e);
    h->e = n; h->cap = cap;
    return 0;
}

/* Maps of at least this many buckets make the buckets of their next growth ahead. */
#define FBX_AHEAD_BUCKETS ((int64_t)1 << 16)

/* The next growth's buckets made ahead, a share at a time, once a map of cap buckets holds
 * more than 3/8 cap keys (it doubles past cap / 2): by then all 2 cap of them are marked free,
 * 16 buckets for each key added past 3/8 cap.  A growth of a map of millions of keys then
 * finds its buckets' pages written already (their first writes, 64 MB for 2M keys, cost
 * ~100 ms of page faults at once on a virtual machine, while a trainer waited) and only
 * moves the keys.  The memory is the growth's own, taken up to an eighth of the map's keys
 * early; where it cannot be had now, the growth asks for it as before. */
static void fbx_ready_ahead(fbx_hashmap *h, int64_t size) {
    const int64_t cap = h->cap, start = 3 * (cap / 8);
    if (cap < FBX_AHEAD_BUCKETS || size <= start || cap >= FBX_MAX_BUCKETS) return;
    if (!h->next) {
        h->next = (fbx_entry *)malloc(sizeof(fbx_entry) * 2 * cap);
        h->next_ready = 0;
        if (!h->next) return;
    }
    int64_t want = 16 * (size - start);
    if (want > 2 * cap) want = 2 * cap;
    for (int64_t i = h->next_ready; i < want; i++) h->next[i].val = FBX_EMPTY;
    if (want > h->next_ready) h->next_ready = want;
}

static inline int fbx_reserve(fbx_hashmap *h, int64_t extra) {
    while (2 * (h->size + extra) > h->cap)
        if (fbx_grow(h) != 0) return -1;
    fbx_ready_ahead(h, h->size + extra);
    return 0;
}

/* out[i] = value of keys[i], or missing when absent */
void fbx_hm_get(const fbx_hashmap *h, const uint64_t *keys, int64_t n, int64_t *out, int64_t missing) {
    for (int64_t k = 0; k < n; k++) {
        if (k + FBX_PROBE_AHEAD < n) fbx_prefetch_probe(h, keys[k + FBX_PROBE_AHEAD]);
        int64_t v = h->e[fbx_find(h->e, h->cap, keys[k])].val;
        out[k] = v == FBX_EMPTY ? missing : v;
    }
}

/* insert or overwrite; returns 0, -1 when memory runs out, or -2 (nothing done) for a
 * value of INT64_MIN (the mark of a free bucket) */
int fbx_hm_put(fbx_hashmap *h, const uint64_t *keys, const int64_t *vals, int64_t n) {
    for (int64_t k = 0; k < n; k++)
        if (vals[k] == FBX_EMPTY) return -2;
    if (fbx_reserve(h, n) != 0) return -1;
    for (int64_t k = 0; k < n; k++) {
        if (k + FBX_PROBE_AHEAD < n) fbx_prefetch_probe(h, keys[k + FBX_PROBE_AHEAD]);
        fbx_entry *b = h->e + fbx_find(h->e, h->cap, keys[k]);
        if (b->val == FBX_EMPTY) { b->key = keys[k]; h->size++; }
        b->val = vals[k];
    }
    return 0;
}

/* vals[key] += 1 (absent keys start at 0); out[i] = the new count */
int fbx_hm_incr(fbx_hashmap *h, const uint64_t *keys, int64_t n, int64_t *out) {
    if (fbx_reserve(h, n) != 0) return -1;
    for (int64_t k = 0; k < n; k++) {
        fbx_entry *b = h->e + fbx_find(h->e, h->cap, keys[k]);
        if (b->val == FBX_EMPTY) { b->key = keys[k]; b->val = 0; h->size++; }
        out[k] = ++b->val;
    }
    return 0;
}

/* copy every entry out (arrays of fbx_hm_size() elements, table order) */
void fbx_hm_export(const fbx_hashmap *h, uint64_t *keys, int64_t *vals) {
    int64_t o = 0;
    for (int64_t i = 0; i < h->cap; i++) {
        if (h->e[i].val == FBX_EMPTY) continue;
        keys[o] = h->e[i].key; vals[o] = h->e[i].val; o++;
    }
}

/* Distinct keys in order of first occurrence: uniq[0..ret), inverse[i] = position of keys[i]
 * in uniq, counts[j] = occurrences of uniq[j].  O(n) with a scratch table of 2n..4n buckets
 * (key and position side by side).  Returns the number of distinct keys, or -1 when memory
 * runs out. */
int64_t fbx_unique_u64(const uint64_t *keys, int64_t n, uint64_t *uniq, int64_t *inverse, int64_t *counts) {
    int64_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    fbx_entry *t = (fbx_entry *)malloc(sizeof(fbx_entry) * cap);
    if (!t) return -1;
    for (int64_t i = 0; i < cap; i++) t[i].val = -1; /* -1: free */
    int64_t mask = cap - 1, m = 0;
    for (int64_t k = 0; k < n; k++) {
        uint64_t key = keys[k];
        int64_t i = (int64_t)(fbx_mix64(key) & (uint64_t)mask);
        while (t[i].val >= 0 && t[i].key != key) i = (i + 1) & mask;
        if (t[i].val < 0) { t[i].key = key; t[i].val = m; uniq[m] = key; counts[m] = 0; m++; }
        inverse[k] = t[i].val;
        counts[t[i].val]++;
    }
    free(t);
    return m;
}

/* Group the occurrences of pooled bags by the row they read, for the backward pass of a
 * sum-pooled embedding bag: idx[k] (in [0, m)) is the row read by occurrence k, the bags
 * are offsets[b] .. offsets[b + 1] (offsets has nbags + 1 entries, offsets[nbags] = n).
 * Fills starts[0..m] (row r's occurrences are bag_sorted[starts[r] .. starts[r + 1])) and
 * bag_sorted[n] (the bag of each occurrence, grouped by row, in occurrence order within a
 * row: a stable counting sort, O(n + m)).  Returns 0, or -1 for an index out of range. */
int fbx_group_by_row(const int64_t *idx, int64_t n, int64_t m, const int64_t *offsets, int64_t nbags,
                     int64_t *starts, int64_t *bag_sorted) {
    memset(starts, 0, sizeof(int64_t) * (m + 1));
    for (int64_t k = 0; k < n; k++) {
        int64_t r = idx[k];
        if (r < 0 || r >= m) return -1;
        starts[r + 1]++;
    }
    for (int64_t r = 0; r < m; r++) starts[r + 1] += starts[r];
    int64_t *pos = (int64_t *)malloc(sizeof(int64_t) * (m > 0 ? m : 1));
    if (!pos) return -2;
    memcpy(pos, starts, sizeof(int64_t) * m);
    for (int64_t b = 0; b < nbags; b++)
        for (int64_t k = offsets[b]; k < offsets[b + 1]; k++) bag_sorted[pos[idx[k]]++] = b;
    free(pos);
    return 0;
}

/* fbx_unique_u64 plus a directory lookup of every distinct key: g[j] = value of uniq[j] in
 * dir, or -1.  For the store's lookup and prefetch: the distinct keys are found in the map's
 * scratch table (kept between calls, told apart by a generation: nothing to clear), then
 * looked up in the directory with each key's bucket prefetched ahead.  Returns the number
 * of distinct keys, or -1 when memory runs out. */
int64_t fbx_unique_get(fbx_hashmap *dir, const uint64_t *keys, int64_t n, uint64_t *uniq, int64_t *inverse,
                       int64_t *counts, int64_t *g) {
    int64_t m = 0;
    if (n >= ((int64_t)1 << 31)) {
        m = fbx_unique_u64(keys, n, uniq, inverse, counts);
        if (m < 0) return -1;
    } else {
        /* n buckets (a power of two) hold a batch with up to 3n/4 distinct keys, in L2 for
         * the usual batch; a batch with more starts again with twice the buckets */
        int64_t cap = 64;
        while (cap < n) cap <<= 1;
    again:
        if (cap > dir->seen_cap) {
            fbx_seen *s = (fbx_seen *)calloc((size_t)cap, sizeof(fbx_seen)); /* gen 0: free */
            if (!s) return -1;
            free(dir->seen);
            dir->seen = s; dir->seen_cap = cap; dir->gen = 0;
        }
        if (++dir->gen == 0) { /* generations wrapped: clear once */
            memset(dir->seen, 0, sizeof(fbx_seen) * (size_t)dir->seen_cap);
            dir->gen = 1;
        }
        const uint32_t gen = dir->gen;
        fbx_seen *seen = dir->seen;
        const uint64_t mask = (uint64_t)cap - 1;
        const int64_t full = cap - cap / 4;
        m = 0;
        for (int64_t k = 0; k < n; k++) {
            /* the scratch bucket of a key further on (a batch of the demo's widest table outgrows L2) */
            if (k + FBX_PROBE_AHEAD < n) __builtin_prefetch(seen + (fbx_mix64(keys[k + FBX_PROBE_AHEAD]) & mask), 1);
            uint64_t key = keys[k];
            const uint64_t h = fbx_mix64(key);
            uint64_t i = h & mask;
            while (seen[i].gen == gen && seen[i].key != key) i = (i + 1) & mask;
            fbx_seen *b = seen + i;
            if (b->gen != gen) {
                if (m == full) { cap <<= 1; goto again; }
                /* the key's directory bucket (the same hash), read by the pass below */
                __builtin_prefetch(dir->e + (int64_t)(h & (uint64_t)(dir->cap - 1)));
                b->gen = gen; b->key = key; b->idx = (uint32_t)m; uniq[m] = key; counts[m] = 0; m++;
            }
            inverse[k] = b->idx;
            counts[b->idx]++;
        }
    }
    for (int64_t j = 0; j < m; j++) {
        if (j + FBX_PROBE_AHEAD < m) fbx_prefetch_probe(dir, uniq[j + FBX_PROBE_AHEAD]);
        int64_t v = dir->e[fbx_find(dir->e, dir->cap, uniq[j])].val;
        g[j] = v == FBX_EMPTY ? -1 : v;
    }
    return m;
}

/* A lookup's bookkeeping over its m distinct rows g[j] (-1: not admitted), counts[j]
 * occurrences each: marks admitted rows used at `step` (last) and adds their occurrences to freq, and
 * adds to out[0..5]: occurrences served by the cache, host RAM, the SSD file, a new row,
 * occurrences of rows not admitted, and distinct admitted rows already cached.
 * The row arrays hold n_rows entries, row r's at [r * rs] (rs = 1: separate arrays; more:
 * the fields of one record per row, side by side) but on_ssd's at [r]; returns 0, or -1
 * (nothing done) for a row beyond.  With nthreads > 1 the admitted rows must be distinct
 * (the same counts for any thread count). */
int fbx_store_touch(const int64_t *g, const int64_t *counts, int64_t m, const int64_t *cache_loc,
                    const int64_t *host_loc, const uint8_t *on_ssd, int64_t *last, int64_t *freq, int64_t rs,
                    int64_t step, int64_t n_rows, int64_t *out, int nthreads) {
    for (int64_t j = 0; j < m; j++)
        if (g[j] >= n_rows) return -1;
    int64_t o0 = 0, o1 = 0, o2 = 0, o3 = 0, o4 = 0, o5 = 0;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1 && m >= FBX_PAR_ROWS) \
    reduction(+ : o0, o1, o2, o3, o4, o5)
    for (int64_t j = 0; j < m; j++) {
        if (j + FBX_AHEAD < m && g[j + FBX_AHEAD] >= 0) {
            int64_t p = g[j + FBX_AHEAD];
            __builtin_prefetch(cache_loc + p * rs); __builtin_prefetch(host_loc + p * rs);
            __builtin_prefetch(on_ssd + p); __builtin_prefetch(last + p * rs, 1); __builtin_prefetch(freq + p * rs, 1);
        }
        int64_t r = g[j], c = counts[j];
        if (r < 0) { o4 += c; continue; }
        last[r * rs] = step;
        freq[r * rs] += c;
        if (cache_loc[r * rs] >= 0) { o0 += c; o5 += 1; }
        else if (host_loc[r * rs] >= 0) o1 += c;
        else if (on_ssd[r]) o2 += c;
        else o3 += c;
    }
    out[0] += o0; out[1] += o1; out[2] += o2; out[3] += o3; out[4] += o4; out[5] += o5;
    return 0;
}

/* The CPU cache's lookup pass over a batch's m distinct rows g[j] (-1: not admitted),
 * counts[j] occurrences each, fusing fbx_store_touch (last, freq, out[0..5] as there),
 * fbx_cache_slots and fbx_pin_slots with the gather of the cached rows (the row arrays as
 * fbx_store_touch's, row r's fields at [r * rs]): slots[j] =
 * cache_loc[g[j]] (-1: not admitted or not cached), pin[slots[j]] = max(pin, pin_step) for
 * the cached ones unless pin_step < 0, and rows[j, 0..dim) = table[slots[j], 0..dim) for the
 * cached ones, zeros for the rows not admitted (the default row); the rows of admitted rows
 * not cached are left for the caller to fill.  With rows null nothing is gathered (the caller
 * reads the cached rows where they lie, through the slots).  The table has n_slots rows of
 * `width` floats.
 * Returns the number of admitted rows not cached, -1 (nothing done) for a row beyond n_rows,
 * or -2 for a cache_loc entry beyond n_slots (a corrupt directory: that row is left out).
 * With nthreads > 1 the admitted rows must be distinct. */
int64_t fbx_lookup_pass(const int64_t *g, const int64_t *counts, int64_t m, const int64_t *cache_loc,
                        const int64_t *host_loc, const uint8_t *on_ssd, int64_t *last, int64_t *freq, int64_t rs,
                        int64_t step,
                        int64_t n_rows, int64_t *pin, int64_t n_slots, int64_t pin_step, const float *table,
                        int64_t width, int64_t dim, int64_t *slots, float *rows, int64_t *out, int nthreads) {
    for (int64_t j = 0; j < m; j++)
        if (g[j] >= n_rows) return -1;
    int64_t o0 = 0, o1 = 0, o2 = 0, o3 = 0, o4 = 0, o5 = 0, miss = 0, bad = 0;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1 && m >= FBX_PAR_ROWS) \
    reduction(+ : o0, o1, o2, o3, o4, o5, miss, bad)
    for (int64_t j = 0; j < m; j++) {
        if (j + 2 * FBX_AHEAD < m && g[j + 2 * FBX_AHEAD] >= 0) { /* one line when the fields are one record */
            int64_t p = g[j + 2 * FBX_AHEAD] * rs;
            __builtin_prefetch(cache_loc + p); __builtin_prefetch(last + p, 1); __builtin_prefetch(freq + p, 1);
        }
        if (j + FBX_AHEAD < m && g[j + FBX_AHEAD] >= 0) { /* its cache_loc was prefetched FBX_AHEAD rows ago */
            int64_t q = cache_loc[g[j + FBX_AHEAD] * rs];
            if (q >= 0 && q < n_slots) {
                const float *r = table + q * width;
                if (rows) { __builtin_prefetch(r); __builtin_prefetch(r + dim - 1); }
                if (pin_step >= 0) __builtin_prefetch(pin + q, 1);
            }
        }
        int64_t r = g[j], c = counts[j];
        float *dst = rows ? rows + j * dim : NULL; /* (no rows: the caller reads them where they lie) */
        if (r < 0) {
            o4 += c;
            slots[j] = -1;
            for (int64_t k = 0; dst && k < dim; k++) dst[k] = 0.0f;
            continue;
        }
        last[r * rs] = step;
        freq[r * rs] += c;
        int64_t s = cache_loc[r * rs];
        if (s >= n_slots) { bad++; s = -1; }
        slots[j] = s;
        if (s >= 0) {
            o0 += c; o5 += 1;
            if (pin_step >= 0 && pin[s] < pin_step) pin[s] = pin_step;
            const float *src = table + s * width;
            for (int64_t k = 0; dst && k < dim; k++) dst[k] = src[k];
            continue;
        }
        miss += 1;
        if (host_loc[r * rs] >= 0) o1 += c;
        else if (on_ssd[r]) o2 += c;
        else o3 += c;
    }
    out[0] += o0; out[1] += o1; out[2] += o2; out[3] += o3; out[4] += o4; out[5] += o5;
    return bad ? -2 : miss;
}

/* Eviction keys of the lfu_window policy over m rows g[j]: a row whose next known use
 * next_use[r] comes after `current` gets in_window - next_use[r] (the sooner, the higher), any
 * other freq[r * fs]; returns 0, or -1 (nothing written) for a row outside [0, n_rows). */
int fbx_window_keys(const int64_t *g, int64_t m, const int64_t *next_use, const int64_t *freq, int64_t fs,
                    int64_t n_rows, int64_t current, int64_t in_window, int64_t *out) {
    for (int64_t j = 0; j < m; j++)
        if (g[j] < 0 || g[j] >= n_rows) return -1;
    for (int64_t j = 0; j < m; j++) {
        if (j + FBX_AHEAD < m) {
            __builtin_prefetch(next_use + g[j + FBX_AHEAD]); __builtin_prefetch(freq + g[j + FBX_AHEAD] * fs);
        }
        int64_t nu = next_use[g[j]];
        out[j] = nu > current ? in_window - nu : freq[g[j] * fs];
    }
    return 0;
}

/* A batch announced for `step` (after every step announced before; `current` begun last):
 * its rows g[0..m) (-1: not admitted, skipped; repeats counted once) are numbered as
 * occurrences occ0, occ0 + 1, ... in ring (index & mask, next step -1 for now); a row whose
 * last announced step is still to come (> current) gets this step as that occurrence's
 * next, any other gets it as its next use.  Writes the distinct rows to rows_out and
 * returns how many, or -1 (nothing done) for a row outside [0, n_rows). */
int64_t fbx_window_announce(const int64_t *g, int64_t m, int64_t step, int64_t current, int64_t *next_use,
                            int64_t *last_step, int64_t *last_occ, int64_t *ring, int64_t mask, int64_t occ0,
                            int64_t n_rows, int64_t *rows_out) {
    for (int64_t j = 0; j < m; j++)
        if (g[j] >= n_rows) return -1;
    int64_t n = 0;
    for (int64_t j = 0; j < m; j++) {
        if (j + FBX_AHEAD < m && g[j + FBX_AHEAD] >= 0) {
            int64_t p = g[j + FBX_AHEAD];
            __builtin_prefetch(last_step + p, 1); __builtin_prefetch(last_occ + p, 1);
            __builtin_prefetch(next_use + p, 1);
        }
        int64_t r = g[j];
        if (r < 0 || last_step[r] == step) continue;
        if (last_step[r] > current) ring[last_occ[r] & mask] = step;
        else next_use[r] = step;
        last_step[r] = step;
        last_occ[r] = occ0 + n;
        ring[(occ0 + n) & mask] = -1;
        rows_out[n++] = r;
    }
    return n;
}

/* Step begun: next_use[g[j]] = ring[(occ0 + j) & mask] for the m rows of a batch announced
 * with its first occurrence numbered occ0 (rows in range). */
void fbx_window_begin(const int64_t *g, int64_t m, const int64_t *ring, int64_t mask, int64_t occ0,
                      int64_t *next_use) {
    for (int64_t j = 0; j < m; j++) {
        if (j + FBX_AHEAD < m) __builtin_prefetch(next_use + g[j + FBX_AHEAD], 1);
        next_use[g[j]] = ring[(occ0 + j) & mask];
    }
}

/* slots[j] = cache_loc[g[j] * rs] (-1: not cached); returns how many are not cached, or -1 for
 * a row outside [0, n_rows). */
int64_t fbx_cache_slots(const int64_t *g, int64_t m, const int64_t *cache_loc, int64_t rs, int64_t n_rows,
                        int64_t *slots) {
    int64_t miss = 0;
    for (int64_t j = 0; j < m; j++) {
        if (j + FBX_AHEAD < m && g[j + FBX_AHEAD] >= 0 && g[j + FBX_AHEAD] < n_rows)
            __builtin_prefetch(cache_loc + g[j + FBX_AHEAD] * rs);
        if (g[j] < 0 || g[j] >= n_rows) return -1;
        int64_t s = cache_loc[g[j] * rs];
        slots[j] = s;
        miss += s < 0;
    }
    return miss;
}

/* pin[s] = max(pin[s], step) for every cached slot s (s >= 0) in slots; returns 0, or -1
 * (nothing done) for a slot beyond n_slots. */
int fbx_pin_slots(const int64_t *slots, int64_t m, int64_t *pin, int64_t n_slots, int64_t step) {
    for (int64_t j = 0; j < m; j++)
        if (slots[j] >= n_slots) return -1;
    for (int64_t j = 0; j < m; j++) {
        int64_t s = slots[j];
        if (s >= 0 && pin[s] < step) pin[s] = step;
    }
    return 0;
}

/* Initial embeddings of new rows, the same bits as fbrapids.trainers.sparse.init.init_rows:
 * element (i, c) is splitmix64(splitmix64(ids[i] ^ seed_mix) + (c + 1) * golden), whose top 24
 * bits give u in [0, 1) exactly, mapped to (2u - 1) * scale (2u - 1 is exact in float, so the
 * one rounding is the product, as in numpy).  Row i goes to out + i * stride: `slices` blocks of
 * `dim` floats side by side, block k from seed_mixes[k] (a row holding several arms' vectors).
 *
 * The columns of a block run in vector lanes: compiled for x86-64-v4 (AVX-512 with its 64-bit
 * multiply), AVX2 and the baseline (gcc's target_clones; the loader picks the machine's best),
 * the same integer arithmetic and the same one rounding in each (no fused multiply-add).  A
 * top-24-bit value converts to float exactly from int32 as from uint64 (int32 has a vector
 * conversion on every target).  An arms' shared row
 * (9 blocks of 16) is written 2.5x faster on AVX-512 than one column at a time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FBX_INIT_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default"), \
                                       optimize("fp-contract=off")))
#else
#define FBX_INIT_CLONES
#endif
FBX_INIT_CLONES void fbx_init_rows(const uint64_t *ids, int64_t n, int64_t dim, const uint64_t *seed_mixes,
                                   int64_t slices, float scale, float *out, int64_t stride) {
    const uint64_t golden = 0x9E3779B97F4A7C15ULL;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t k = 0; k < slices; k++) {
            const uint64_t base = fbx_mix64(ids[i] ^ seed_mixes[k]);
            float *restrict row = out + i * stride + k * dim;
            for (int64_t c = 0; c < dim; c++) {
                const uint64_t h = fbx_mix64(base + (uint64_t)(c + 1) * golden); /* inlined: it vectorizes */
                float unit = (float)(int32_t)(h >> 40) * (1.0f / 16777216.0f);
                float centred = unit * 2.0f - 1.0f;
                row[c] = centred * scale;
            }
        }
    }
}

/* A new row written into its cache slot s: its initial embedding (fbx_init_rows of its id),
 * its optimizer state (state[0..width - dim * slices)), cache_loc[r * rs] = s, owner[s] = r,
 * dirty[s] = 1, pin[s] = pin_step. */
static inline void fbx_new_row(float *table, int64_t width, int64_t s, int64_t r, const uint64_t *id,
                               int64_t *cache_loc, int64_t rs, int64_t *owner, uint8_t *dirty, int64_t *pin,
                               int64_t pin_step, int64_t dim, const uint64_t *seed_mixes, int64_t slices, float scale,
                               const float *state) {
    float *row = table + s * width;
    const int64_t emb = dim * slices;
    fbx_init_rows(id, 1, dim, seed_mixes, slices, scale, row, width);
    for (int64_t c = emb; c < width; c++) row[c] = state[c - emb];
    cache_loc[r * rs] = s;
    owner[s] = r;
    dirty[s] = 1;
    if (pin) pin[s] = pin_step;
}

/* New rows g[0..m) (admitted, never materialised: not cached, not in host RAM, not on the
 * SSD file) placed in the free cache slots slots[0..m) in one pass: each one's initial
 * embedding (fbx_init_rows of its id g2id[g]: `slices` blocks of `dim`) and optimizer state
 * (state[0..width - dim * slices))
 * written into its table row, cache_loc[g * rs] = slot, owner[slot] = g, dirty[slot] = 1,
 * pin[slot] = pin_step.  Returns 0, -1 (nothing done) for a row outside [0, n_rows) or one
 * that is not new, or -2 (nothing done) for a slot outside [0, n_slots). */
int64_t fbx_place_new(const int64_t *g, int64_t m, const int64_t *slots, const uint64_t *g2id, int64_t *cache_loc,
                      const int64_t *host_loc, const uint8_t *on_ssd, int64_t rs, int64_t n_rows, int64_t *owner,
                      uint8_t *dirty, int64_t *pin, int64_t n_slots, int64_t pin_step, float *table, int64_t width,
                      int64_t dim, const uint64_t *seed_mixes, int64_t slices, float scale, const float *state) {
    for (int64_t j = 0; j < m; j++) {
        int64_t r = g[j];
        if (r < 0 || r >= n_rows || cache_loc[r * rs] >= 0 || host_loc[r * rs] >= 0 || on_ssd[r]) return -1;
        if (slots[j] < 0 || slots[j] >= n_slots) return -2;
    }
    for (int64_t j = 0; j < m; j++)
        fbx_new_row(table, width, slots[j], g[j], g2id + g[j], cache_loc, rs, owner, dirty, pin, pin_step, dim,
                    seed_mixes, slices, scale, state);
    return 0;
}

/* fbx_lookup_pass over several tables in one call: table t's arguments are the words
 * desc[t * FBX_LK_WORDS + k] (k: FBX_LK_*, pointers as integers), its result goes to ret[t]. */
enum { FBX_LK_G, FBX_LK_COUNTS, FBX_LK_M, FBX_LK_CACHE_LOC, FBX_LK_HOST_LOC, FBX_LK_ON_SSD, FBX_LK_LAST,
       FBX_LK_FREQ, FBX_LK_RS, FBX_LK_N_ROWS, FBX_LK_PIN, FBX_LK_N_SLOTS, FBX_LK_TABLE, FBX_LK_WIDTH,
       FBX_LK_SLOTS, FBX_LK_ROWS, FBX_LK_OUT, FBX_LK_STEP, FBX_LK_PIN_STEP, FBX_LK_DIM, FBX_LK_BOOKED,
       FBX_LK_WORDS };

int fbx_gather_cols(const float *table, int64_t n_slots, int64_t width, const int64_t *slots, int64_t m,
                    int64_t ncols, float *out, int nthreads); /* rows.c */

/* A table whose batch was booked ahead (fbx_book_rows): its slots are known, its rows only
 * gathered: rows[j, 0..dim) = table[slots[j], 0..dim), or not at all where rows is null (the
 * caller reads them where they lie, through the slots).  Returns 0, or -2 for a slot out of range. */
static int64_t fbx_gather_booked(const int64_t *w) {
    const int64_t m = w[FBX_LK_M], n_slots = w[FBX_LK_N_SLOTS];
    const int64_t *slots = (const int64_t *)w[FBX_LK_SLOTS];
    const float *table = (const float *)w[FBX_LK_TABLE];
    float *rows = (float *)w[FBX_LK_ROWS];
    if (rows) /* (one thread: the tables' passes run one after another in one call) */
        return fbx_gather_cols(table, n_slots, w[FBX_LK_WIDTH], slots, m, w[FBX_LK_DIM], rows, 1) ? -2 : 0;
    for (int64_t j = 0; j < m; j++)
        if (slots[j] < 0 || slots[j] >= n_slots) return -2;
    return 0;
}

/* A spin-wait's hint to the core (x86's pause, ARM's yield; nothing elsewhere): the library
 * is compiled on the user's machine, whatever its architecture. */
static inline void fbx_spin_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield");
#endif
}

/* Wait until *progress (an update of the tables running on another thread:
 * fbx_rowwise_adagrad_tables) reaches need: spinning a while, then yielding the CPU. */
static void fbx_wait_progress(const int64_t *progress, int64_t need) {
    for (int64_t spins = 0; __atomic_load_n(progress, __ATOMIC_ACQUIRE) < need; spins++) {
        if (spins < 4096)
            fbx_spin_pause();
        else
            sched_yield();
    }
}

/* Every table's pass (fbx_gather_booked or fbx_lookup_pass, desc row t: FBX_LK_*), one after
 * another; progress (or NULL): table t is passed once *progress >= need[t], the update of its
 * rows that still runs on another thread being done by then (need[t] = 0: none pending). */
void fbx_lookup_tables(const int64_t *desc, int64_t n, int64_t *ret, int nthreads, const int64_t *progress,
                       const int64_t *need) {
    for (int64_t t = 0; t < n; t++) {
        const int64_t *w = desc + t * FBX_LK_WORDS;
        if (progress && need[t] > 0)
            fbx_wait_progress(progress, need[t]);
        if (w[FBX_LK_BOOKED]) {
            ret[t] = fbx_gather_booked(w);
            continue;
        }
        ret[t] = fbx_lookup_pass((const int64_t *)w[FBX_LK_G], (const int64_t *)w[FBX_LK_COUNTS], w[FBX_LK_M],
                                 (const int64_t *)w[FBX_LK_CACHE_LOC], (const int64_t *)w[FBX_LK_HOST_LOC],
                                 (const uint8_t *)w[FBX_LK_ON_SSD], (int64_t *)w[FBX_LK_LAST],
                                 (int64_t *)w[FBX_LK_FREQ], w[FBX_LK_RS], w[FBX_LK_STEP], w[FBX_LK_N_ROWS],
                                 (int64_t *)w[FBX_LK_PIN], w[FBX_LK_N_SLOTS], w[FBX_LK_PIN_STEP],
                                 (const float *)w[FBX_LK_TABLE], w[FBX_LK_WIDTH], w[FBX_LK_DIM],
                                 (int64_t *)w[FBX_LK_SLOTS], (float *)w[FBX_LK_ROWS], (int64_t *)w[FBX_LK_OUT],
                                 nthreads);
    }
}

/* A batch's keys prepared for one RAM tier in one call (the prefetch thread's work): the
 * distinct keys, inverse, counts and rows of fbx_unique_get; then every key not in the
 * directory admitted, in first-occurrence order, as rows n_rows, n_rows + 1, ... (dir maps it,
 * g2id[row] = key) and placed in the cache slot popped from the top of the free stack
 * free[0..*n_free) (*n_free decreases): its initial row written (fbx_init_rows, then the
 * optimizer state[0..width - dim)), cache_loc[row * rs] = slot, owner[slot] = row,
 * dirty[slot] = 1, pin[slot] = pin_step (no pin with pin null: a cache that never evicts).
 * The caller has made room: g2id and the records hold n_rows + n rows, *n_free >= n.
 * out[0] = distinct keys, out[1] = rows admitted, out[2] = their occurrences.  Returns 0, or -1 (memory: nothing admitted), -2 (a free slot out of
 * range: nothing admitted), -4 (no room for the new rows: nothing admitted). */
int64_t fbx_prepare_ram_tier(fbx_hashmap *dir, const uint64_t *keys, int64_t n, uint64_t *uniq, int64_t *inverse,
                             int64_t *counts, int64_t *g, int64_t n_rows, int64_t row_cap, uint64_t *g2id,
                             int64_t *cache_loc, int64_t rs, int64_t *free_slots, int64_t *n_free, int64_t *owner,
                             uint8_t *dirty, int64_t *pin, int64_t n_slots, int64_t pin_step, float *table,
                             int64_t width, int64_t dim, const uint64_t *seed_mixes, int64_t slices, float scale,
                             const float *state, int64_t *out) {
    int64_t m = fbx_unique_get(dir, keys, n, uniq, inverse, counts, g);
    if (m < 0) return -1;
    int64_t fresh = 0, occ = 0;
    for (int64_t j = 0; j < m; j++)
        if (g[j] < 0) fresh++;
    if (n_rows + fresh > row_cap || fresh > *n_free) return -4;
    for (int64_t k = 1; k <= fresh; k++)
        if (free_slots[*n_free - k] < 0 || free_slots[*n_free - k] >= n_slots) return -2;
    if (fresh && fbx_reserve(dir, fresh) != 0) return -1;
    for (int64_t j = 0; j < m; j++) {
        if (g[j] >= 0) continue;
        int64_t r = n_rows++, s = free_slots[--*n_free];
        fbx_entry *b = dir->e + fbx_find(dir->e, dir->cap, uniq[j]);
        b->key = uniq[j]; b->val = r; dir->size++;
        g[j] = r;
        g2id[r] = uniq[j];
        fbx_new_row(table, width, s, r, uniq + j, cache_loc, rs, owner, dirty, pin, pin_step, dim, seed_mixes, slices,
                    scale, state);
        occ += counts[j];
    }
    out[0] = m; out[1] = fresh; out[2] = occ;
    return 0;
}

/* A prepared batch's bookkeeping, done ahead on the prefetch thread (its rows all cached:
 * one RAM tier): for its m distinct rows g[j] (counts[j] occurrences each), old_last[j] =
 * last[g * rs] (to undo it if the batch is not looked up next), last[g * rs] = step,
 * freq[g * rs] += counts[j], slots[j] = cache_loc[g * rs], pin[slot] = max(pin, pin_step)
 * unless pin_step < 0, and out[0..6) as fbx_lookup_pass adds them (every row cached).
 * Returns 0, or -1 (nothing done) for a row out of range or not cached. */
int64_t fbx_book_rows(const int64_t *g, const int64_t *counts, int64_t m, const int64_t *cache_loc, int64_t *last,
                      int64_t *freq, int64_t rs, int64_t n_rows, int64_t *pin, int64_t n_slots, int64_t step,
                      int64_t pin_step, int64_t *slots, int64_t *old_last, int64_t *out) {
    /* Three dependent reads a row (its record, then its slot's pin), each a likely miss in a
     * large table: the check below reads the records ahead (they stay in L2 for the pass
     * after), and that pass reads each row's pin ahead once its record is there.  Prefetched
     * so, the prepare of a batch of 16,384 Zipf ids in a 1M-row table took 0.38 ms, not 0.42,
     * and the store benchmark's step, which waits for it, 10% less. */
    for (int64_t j = 0; j < m; j++) {
        if (j + 2 * FBX_AHEAD < m) {
            int64_t p = g[j + 2 * FBX_AHEAD];
            if (p >= 0 && p < n_rows) __builtin_prefetch(cache_loc + p * rs, 1);
        }
        int64_t r = g[j];
        if (r < 0 || r >= n_rows || cache_loc[r * rs] < 0 || cache_loc[r * rs] >= n_slots) return -1;
    }
    int64_t occ = 0;
    for (int64_t j = 0; j < m; j++) {
        if (j + 2 * FBX_AHEAD < m) {
            int64_t p = g[j + 2 * FBX_AHEAD] * rs;
            __builtin_prefetch(cache_loc + p); __builtin_prefetch(last + p, 1); __builtin_prefetch(freq + p, 1);
        }
        if (pin_step >= 0 && j + FBX_AHEAD < m) __builtin_prefetch(pin + cache_loc[g[j + FBX_AHEAD] * rs], 1);
        int64_t r = g[j] * rs, s = cache_loc[r];
        old_last[j] = last[r];
        last[r] = step;
        freq[r] += counts[j];
        slots[j] = s;
        if (pin_step >= 0 && pin[s] < pin_step) pin[s] = pin_step;
        occ += counts[j];
    }
    out[0] += occ; out[5] += m;
    return 0;
}

/* Undo fbx_book_rows for a batch that was not looked up next: last[g * rs] = old_last[j],
 * freq[g * rs] -= counts[j] (pins are left: they only keep rows, and one RAM tier evicts none). */
void fbx_unbook_rows(const int64_t *g, const int64_t *counts, int64_t m, int64_t *last, int64_t *freq, int64_t rs,
                     const int64_t *old_last) {
    for (int64_t j = m - 1; j >= 0; j--) {
        int64_t r = g[j] * rs;
        last[r] = old_last[j];
        freq[r] -= counts[j];
    }
}

/* The prefetch thread's work for several tables of one RAM tier in one call (one release of
 * Python's lock for all of them, not three calls per table): table t's arguments are the words
 * desc[t * FBX_PR_WORDS + k] (k: FBX_PR_*, pointers as integers, the scale as a float's bits):
 * fbx_prepare_ram_tier of its keys, then fbx_book_rows of their distinct rows at pin_step
 * (booked ahead of the lookup at that step).  A pin array of 0 (null): nothing is pinned (a
 * growable cache, which never evicts: a pin there is a random write a row that nothing reads;
 * without them the prepare of a batch of 16,384 Zipf ids in a 1M-row table took about 13%
 * less).  ret[t]: as fbx_prepare_ram_tier's (-4: no room
 * for its new rows, nothing done), or -3 (a row out of range or not cached: nothing booked). */
enum { FBX_PR_DIR, FBX_PR_KEYS, FBX_PR_N, FBX_PR_UNIQ, FBX_PR_INVERSE, FBX_PR_COUNTS, FBX_PR_G, FBX_PR_N_ROWS,
       FBX_PR_ROW_CAP, FBX_PR_G2ID, FBX_PR_CACHE_LOC, FBX_PR_RS, FBX_PR_FREE, FBX_PR_N_FREE, FBX_PR_OWNER,
       FBX_PR_DIRTY, FBX_PR_PIN, FBX_PR_N_SLOTS, FBX_PR_PIN_STEP, FBX_PR_TABLE, FBX_PR_WIDTH, FBX_PR_DIM,
       FBX_PR_MIXES, FBX_PR_SLICES, FBX_PR_SCALE, FBX_PR_STATE, FBX_PR_OUT, FBX_PR_LAST, FBX_PR_FREQ,
       FBX_PR_SLOTS, FBX_PR_OLD_LAST, FBX_PR_TOUCHED, FBX_PR_WORDS };

void fbx_prepare_tables(const int64_t *desc, int64_t n, int64_t *ret) {
    for (int64_t t = 0; t < n; t++) {
        const int64_t *w = desc + t * FBX_PR_WORDS;
        uint32_t bits = (uint32_t)w[FBX_PR_SCALE];
        float scale;
        memcpy(&scale, &bits, sizeof scale);
        int64_t *out = (int64_t *)w[FBX_PR_OUT];
        int64_t *g = (int64_t *)w[FBX_PR_G], *counts = (int64_t *)w[FBX_PR_COUNTS];
        int64_t rc = fbx_prepare_ram_tier(
            (fbx_hashmap *)w[FBX_PR_DIR], (const uint64_t *)w[FBX_PR_KEYS], w[FBX_PR_N], (uint64_t *)w[FBX_PR_UNIQ],
            (int64_t *)w[FBX_PR_INVERSE], counts, g, w[FBX_PR_N_ROWS], w[FBX_PR_ROW_CAP], (uint64_t *)w[FBX_PR_G2ID],
            (int64_t *)w[FBX_PR_CACHE_LOC], w[FBX_PR_RS], (int64_t *)w[FBX_PR_FREE], (int64_t *)w[FBX_PR_N_FREE],
            (int64_t *)w[FBX_PR_OWNER], (uint8_t *)w[FBX_PR_DIRTY], (int64_t *)w[FBX_PR_PIN], w[FBX_PR_N_SLOTS],
            w[FBX_PR_PIN_STEP], (float *)w[FBX_PR_TABLE], w[FBX_PR_WIDTH], w[FBX_PR_DIM],
            (const uint64_t *)w[FBX_PR_MIXES], w[FBX_PR_SLICES], scale, (const float *)w[FBX_PR_STATE], out);
        int64_t *pin = (int64_t *)w[FBX_PR_PIN];
        if (rc == 0 && fbx_book_rows(g, counts, out[0], (const int64_t *)w[FBX_PR_CACHE_LOC], (int64_t *)w[FBX_PR_LAST],
                                     (int64_t *)w[FBX_PR_FREQ], w[FBX_PR_RS], w[FBX_PR_ROW_CAP],
                                     pin, w[FBX_PR_N_SLOTS], w[FBX_PR_PIN_STEP],
                                     pin ? w[FBX_PR_PIN_STEP] : -1, (int64_t *)w[FBX_PR_SLOTS], (int64_t *)w[FBX_PR_OLD_LAST],
                                     (int64_t *)w[FBX_PR_TOUCHED]) != 0)
            rc = -3;
        ret[t] = rc;
    }
}
