/* The AUC of one prediction vector under every bootstrap round of a trial, in C
 * (fbrapids/app/trial_stats.py, UserResamples.rounds).
 *
 * The rows come in score order, tied scores in groups (group g is rows start[g] .. start[g + 1]);
 * row i belongs to user user[i] and round r weighs it counts[r][user[i]] (how often the round
 * drew its user).  Per round, in exact integer sums as the numpy reference computes them:
 * pos_g and neg_g the weighted positives and negatives of group g, below_g the negatives of
 * the groups under it, twice = sum of pos_g * (2 * below_g + neg_g) (ties count half, kept
 * whole by the factor 2), AUC = twice / (2 * positives * negatives), NaN where a round holds
 * one class only.  The rounds are split over the threads (each its own sums: the same bits
 * for any thread count). */
#include <math.h>
#include <stdint.h>

void fbx_auc_rounds(const int64_t *counts, int64_t rounds, int64_t n_users, const int64_t *user, const int64_t *y,
                    int64_t n, const int64_t *start, int64_t groups, double *out, int nthreads) {
#pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1 && rounds * n >= 1 << 20)
    for (int64_t r = 0; r < rounds; r++) {
        const int64_t *c = counts + r * n_users;
        int64_t below = 0, positives = 0, twice = 0;
        for (int64_t g = 0; g < groups; g++) {
            const int64_t end = g + 1 < groups ? start[g + 1] : n;
            int64_t pos = 0, all = 0;
            for (int64_t i = start[g]; i < end; i++) {
                const int64_t w = c[user[i]];
                pos += w * y[i];
                all += w;
            }
            const int64_t neg = all - pos;
            twice += pos * (2 * below + neg);
            below += neg;
            positives += pos;
        }
        const int64_t total = positives * below;
        out[r] = total > 0 ? (double)twice / (2.0 * (double)total) : NAN;
    }
}
