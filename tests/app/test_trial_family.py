"""Many candidates against one baseline, and the sequential design: the family's correction
against its rules and scipy, its error rate and the looks' under the trial's own model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fbrapids.app.trial_family import adjust_p, two_sided_p, verdict_of
from fbrapids.app.trial_sequential import SequentialDesign
from fbrapids.app.trials import combine


def _holm_rejects(p, alpha):
    """Holm's rule as his paper states it: sorted ascending, reject while p_(j) <= alpha / (m - j + 1)."""
    out = [False] * len(p)
    for j, i in enumerate(np.argsort(p, kind="mergesort")):
        if p[i] > alpha / (len(p) - j):
            break
        out[i] = True
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=12), st.sampled_from([0.01, 0.05, 0.1]))
def test_adjusted_p_rejects_what_holm_and_bh_reject(p, alpha):
    from scipy.stats import false_discovery_control

    holm = adjust_p(p, "holm")
    rule = _holm_rejects(p, alpha)
    for adj, rejected, raw in zip(holm, rule, p):
        if not any(abs(adj - alpha) < 1e-12 for adj in holm):  # (a tie with alpha decides by <= or <)
            assert (adj <= alpha) == rejected
        assert raw <= adj <= 1
    assert np.allclose(adjust_p(p, "bh"), false_discovery_control(p, method="bh"), rtol=1e-12, atol=0)
    assert adjust_p(p[:1], "holm") == p[:1] == [pytest.approx(q) for q in adjust_p(p[:1], "bh")]


def test_p_value_and_interval_give_one_verdict():
    rng = np.random.default_rng(2)
    for _ in range(300):
        k = int(rng.integers(1, 6))
        d = rng.normal(rng.normal(0, 0.003), rng.uniform(0.0005, 0.004), k)
        c = combine(d, d.mean() + rng.normal(0, rng.uniform(0.0002, 0.002), 60))
        p = two_sided_p(c["delta"], c["se"], c["df"])
        assert c["verdict"] == verdict_of(c["delta"], p, 0.05)
        assert c["p_better"] == pytest.approx(1 - p / 2 if c["delta"] > 0 else p / 2, abs=1e-9)


def test_pooled_p_is_the_randomized_block_test_of_a_least_squares_fit():
    """The reference: candidates x seeds fitted by least squares with a candidate and a seed
    term (numpy's lstsq on dummy columns); a candidate's mean has variance
    (s_seeds^2 + s_resid^2) / K, s_seeds^2 the seed terms' variance less the residual's
    share, at Satterthwaite's degrees of freedom with the users' variance added."""
    from scipy import stats

    from fbrapids.app.trial_family import pooled_p

    rng = np.random.default_rng(4)
    n, k = 5, 4
    d = rng.normal(0.001, 0.002, (n, k)) + rng.normal(0, 0.002, k)
    v = rng.uniform(1e-7, 2e-6, n)
    x = np.zeros((n * k, n + k - 1))
    for i in range(n):
        for j in range(k):
            x[i * k + j, i] = 1
            if j:
                x[i * k + j, n + j - 1] = 1
    coef, rss, *_ = np.linalg.lstsq(x, d.ravel(), rcond=None)
    s2_resid = float(rss[0]) / ((n - 1) * (k - 1))
    seed_terms = np.r_[0.0, coef[n:]]
    ms_seeds = n * float(np.var(seed_terms, ddof=1))  # equals the seeds' mean square of the block design
    a, b = ms_seeds / (n * k), s2_resid * (1 - 1 / n) / k
    df_seeds = (a + b) ** 2 / (a ** 2 / (k - 1) + b ** 2 / ((n - 1) * (k - 1)))
    for i, p in enumerate(pooled_p(d, v)):
        var = a + b + v[i]
        t = abs(d[i].mean()) / np.sqrt(var)
        assert p == pytest.approx(2 * stats.t.sf(t, df_seeds * (var / (a + b)) ** 2), rel=1e-9)


def _family(rng, effects, k=3, sd_train=0.0025, sd_users=0.001, spread=1.0, share=0.3, boot=60):
    """One trial of N candidates against one baseline, drawn from the trial's model:
    d_ik = effect_i + U_i + T_ik + B_k, B_k what the shared baseline adds to every
    candidate's seed-k delta; each candidate's training noise scaled by a factor drawn
    in [1/spread, spread].  Returns the deltas, their own p-values and the family's."""
    from fbrapids.app.trial_family import family_p

    n = len(effects)
    b = rng.normal(0, sd_train * np.sqrt(share), k)
    scale = np.exp(rng.uniform(-np.log(spread), np.log(spread), n))
    table, own, v = [], [], []
    for e, f in zip(effects, scale):
        d = e + rng.normal(0, sd_users) + rng.normal(0, sd_train * np.sqrt(1 - share) * f, k) + b
        boot_rounds = d.mean() + rng.normal(0, sd_users, boot)
        c = combine(d, boot_rounds)
        table.append(d)
        own.append(two_sided_p(c["delta"], c["se"], c["df"]))
        v.append(c["se_users"] ** 2)
    return np.array([t.mean() for t in table]), own, family_p(own, np.array(table), v)


def test_the_family_holds_its_error_on_ten_noise_candidates_and_finds_a_planted_one():
    """Ten pure-noise candidates against one baseline, 300 simulated trials, the
    candidates' training noise differing by up to 2x in SD: Holm on the candidates' own
    p-values calls one in more than 7% of trials (the tails of a t with 2 degrees of freedom
    of training noise); on the family's p-values, in under 5%.  A planted candidate
    (+0.0075, the users' noise dominant, as at 100k rows) among nine noise ones is found in
    most trials."""
    rng = np.random.default_rng(5)
    sims, alpha = 300, 0.05
    own_called = family_called = 0
    for _ in range(sims):
        _, own, fam = _family(rng, [0.0] * 10, spread=2.0)
        own_called += min(adjust_p(own, "holm")) < alpha
        family_called += min(adjust_p(fam, "holm")) < alpha
    assert own_called / sims > 0.07
    assert family_called / sims <= 0.05  # binomial SD at 5%: 1.3%; measured ~3% over 1,500 trials
    found = 0
    for _ in range(100):
        delta, _, fam = _family(rng, [0.0075] + [0.0] * 9, sd_train=0.0009, sd_users=0.0016)
        found += verdict_of(delta[0], adjust_p(fam, "holm")[0], alpha) == "helps"
    assert found > 80


def _sequential(rng, effect, design, sd_train=0.002, sd_users=0.001):
    """One sequential trial of the design on deltas drawn from the trial's model; its last
    look's test (level: the look's share) and the seeds it took."""
    d_all = effect + rng.normal(0, sd_users) + rng.normal(0, sd_train, design.max_seeds)
    users = rng.normal(0, sd_users, 80)
    for k in range(design.first, design.max_seeds + 1):
        c = combine(d_all[:k], d_all[:k].mean() + users, 1 - design.alpha_share(0.05))
        if not design.look(k, {"x": c["interval"]}):
            return c, k
    return c, design.max_seeds


def test_sequential_looks_keep_the_error_rate_and_stop_early_on_a_clear_effect():
    """Looks at 2..6 seeds, each at alpha / 5: on noise the false "helps"/"hurts" rate stays
    under 5% (testing each look at the full alpha would not: ~7-8%); a clear effect (+0.008
    against a margin of 0.002) stops after about 3 seeds and is found."""
    rng = np.random.default_rng(1)
    sims = 500
    false = naive = 0
    for _ in range(sims):
        c, _ = _sequential(rng, 0.0, SequentialDesign(0.002, 6))
        false += c["verdict"] != "no detectable effect"
        d_all = rng.normal(0, 0.001) + rng.normal(0, 0.002, 6)  # the same rule at the full alpha each look
        users = rng.normal(0, 0.001, 80)
        for k in range(2, 7):
            c = combine(d_all[:k], d_all[:k].mean() + users)
            if not (c["interval"][0] < 0.002 < c["interval"][1]):
                break
        naive += c["verdict"] != "no detectable effect"
    assert false / sims <= 0.05 < naive / sims
    runs = [_sequential(rng, 0.008, SequentialDesign(0.002, 6)) for _ in range(200)]
    assert np.mean([c["verdict"] == "helps" for c, _ in runs]) > 0.95
    assert np.mean([k for _, k in runs]) < 3.6
