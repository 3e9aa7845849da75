/* Row movement and the sparse optimizers of the embedding store, in C.
 *
 * The SSD tier reads and writes rows with pread / pwrite (never a memory map, so a full
 * disk or a truncated file is an error code, not SIGBUS); runs of consecutive rows are
 * one system call.  The optimizers update cached rows in place by slot.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>

/* Read rows g[0..n) (ascending, row r at byte r * row_bytes) of the file fd into out
 * (n * row_bytes bytes), coalescing consecutive rows.  Returns 0; 1 + j when row g[j]
 * lies beyond the end of the file (a short read); -errno on an I/O error. */
int64_t fbx_pread_rows(int fd, const int64_t *g, int64_t n, int64_t row_bytes, char *out) {
    int64_t j = 0;
    while (j < n) {
        int64_t k = j + 1;
        while (k < n && g[k] == g[k - 1] + 1) k++;
        size_t want = (size_t)((k - j) * row_bytes), got = 0;
        off_t at = (off_t)(g[j] * row_bytes);
        while (got < want) {
            ssize_t r = pread(fd, out + j * row_bytes + got, want - got, at + (off_t)got);
            if (r < 0) {
                if (errno == EINTR) continue;
                return -(int64_t)errno;
            }
            if (r == 0) return 1 + j + (int64_t)(got / (size_t)row_bytes);
            got += (size_t)r;
        }
        j = k;
    }
    return 0;
}

/* Write rows (n * row_bytes bytes) to rows g[0..n) (ascending) of the file fd, coalescing
 * consecutive rows.  Returns 0, or -errno (ENOSPC, EFBIG, EIO ...). */
int64_t fbx_pwrite_rows(int fd, const int64_t *g, int64_t n, int64_t row_bytes, const char *rows) {
    int64_t j = 0;
    while (j < n) {
        int64_t k = j + 1;
        while (k < n && g[k] == g[k - 1] + 1) k++;
        size_t want = (size_t)((k - j) * row_bytes), put = 0;
        off_t at = (off_t)(g[j] * row_bytes);
        while (put < want) {
            ssize_t r = pwrite(fd, rows + j * row_bytes + put, want - put, at + (off_t)put);
            if (r < 0) {
                if (errno == EINTR) continue;
                return -(int64_t)errno;
            }
            if (r == 0) return -(int64_t)ENOSPC;
            put += (size_t)r;
        }
        j = k;
    }
    return 0;
}

/* Row-wise Adagrad in place on the rows table (n_slots rows of `width` floats, the
 * accumulator at column dim), given each row's new accumulator acc[j] and denominator
 * den[j] = sqrt(acc[j]) + eps (computed by the caller with torch, whose vectorised sqrt is
 * not always the correctly rounded one): row[dim] = acc[j];
 * row[c] -= (grad[j, c] * lr) / den[j].  The same float operations, in the same order, as
 * the torch formulation, so the same bits.  Returns 0, or -1 (nothing done) for a slot
 * outside [0, n_slots). */
int fbx_rowwise_adagrad(float *table, int64_t n_slots, int64_t width, int64_t dim, const int64_t *slots, int64_t m,
                        const float *grad, const float *acc, const float *den, float lr) {
    for (int64_t j = 0; j < m; j++)
        if (slots[j] < 0 || slots[j] >= n_slots) return -1;
    for (int64_t j = 0; j < m; j++) {
        float *row = table + slots[j] * width;
        const float *g = grad + j * dim;
        const float dj = den[j];
        row[dim] = acc[j];
        for (int64_t c = 0; c < dim; c++) {
            float step = g[c] * lr;
            row[c] = row[c] - step / dj;
        }
    }
    return 0;
}

/* SGD in place: row[c] -= grad[j, c] * lr for the rows at slots[j].  Returns 0, or -1
 * (nothing done) for a slot outside [0, n_slots). */
int fbx_sgd(float *table, int64_t n_slots, int64_t width, int64_t dim, const int64_t *slots, int64_t m,
            const float *grad, float lr) {
    for (int64_t j = 0; j < m; j++)
        if (slots[j] < 0 || slots[j] >= n_slots) return -1;
    for (int64_t j = 0; j < m; j++) {
        float *row = table + slots[j] * width;
        const float *g = grad + j * dim;
        for (int64_t c = 0; c < dim; c++) row[c] = row[c] - g[c] * lr;
    }
    return 0;
}
