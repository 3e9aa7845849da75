"""A trial's text: the ranked table of many candidates, the sequential looks, the cost.

Example:
    >>> print("\\n".join(cost_lines({"wall_s": 61.2, "models": 9, "passes": 1, "plain_training_s": 45.0,
    ...                               "ratio": 1.36, "load": [2.1, 2.3]})))
      cost: 61.2 s wall for 9 models in 1 pass; one plain training on the same data 45.0 s: the trial took 1.36x (load 2.1 -> 2.3)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from fbrapids.app.trial_family import CandidateTrials
    from fbrapids.app.trial_stats import TrialResult

METRICS = ("auc", "gauc")


def cost_lines(cost: Mapping[str, Any]) -> list[str]:
    """The trial's cost (``TrialResult.cost``) as one line; none when not recorded."""
    if not cost:
        return []
    passes = int(cost.get("passes", 0))
    line = (f"  cost: {cost['wall_s']:.1f} s wall for {cost['models']} models in {passes} pass"
            f"{'es' if passes != 1 else ''}")
    extracted = cost.get("passes_extracted")
    if extracted is not None and passes > 1:
        line += f" ({extracted} extracting the rows, {passes - extracted} on the batches kept in memory)"
    if cost.get("models_resumed"):
        line += f" ({cost['models_resumed']} more models' predictions resumed from the work dir)"
    if cost.get("plain_training_s") is not None:
        line += (f"; one plain training on the same data {cost['plain_training_s']:.1f} s: the trial took "
                 f"{cost['ratio']:.2f}x")
    else:
        line += "; one plain training not timed (reference=True / --reference times one beside it)"
    load = cost.get("load")
    if load:
        line += f" (load {load[0]:.1f} -> {load[1]:.1f})"
    return [line]


def sequential_lines(seq: Mapping[str, Any]) -> list[str]:
    """A sequential trial's design and looks (``TrialResult.sequential``); none for a fixed K."""
    if not seq:
        return []
    looks = "; ".join(f"K={h['seeds']}: " + ", ".join(f"{n} {p}" for n, p in h["positions"].items())
                      for h in seq["looks"])
    return [f"  sequential: margin {seq['min_effect']:+.4f} on {seq['metric'].upper()}, up to {seq['max_seeds']} "
            f"seeds, each look at alpha/{seq['looks_allowed']}; looks: {looks}; stopped: {seq['stopped']}"]


def _row(rank: int, name: str, r: TrialResult, m: str) -> str:
    lo, hi = r.interval[m]
    aa = f"  A/A {r.aa_delta[m]:+.4f}" if m in r.aa_delta else ""
    return (f"  {rank:>3}  {name:<24} {r.delta[m]:+.4f} [{lo:+.4f}, {hi:+.4f}]  p {r.p_value[m]:.4f}  "
            f"family {r.p_family[m]:.4f}  adjusted {r.p_adjusted[m]:.4f}  -> {r.verdict[m]}{aa}")


def render_family(family: CandidateTrials) -> str:
    """The ranked table of ``trial(..., each=True)``: per metric, the candidates by delta
    (largest first), each with its interval, p-value, adjusted p-value and verdict."""
    n = len(family.results)
    first = next(iter(family.results.values()))
    pct = f"{100 * first.level:g}%"  # a sequential trial's look: its share of the error rate
    lines = [f"feature trial: {n} candidate(s) each against one baseline  ({len(family.seeds)} seed(s) per arm, "
             f"{family.n_boot} bootstrap rounds over {family.n_users:,} held-out users)"]
    if family.rows:
        lines.append(f"  rows: trained {family.rows.get('trained', 0):,}, held out "
                     f"{family.rows.get('held out', 0):,}" + (f" ({family.split['rule']})"
                                                              if family.split.get("rule") else ""))
    looks = family.sequential.get("looks_allowed")
    lines.append(f"  verdicts: adjusted p below {1 - family.level:.3g}, corrected for the {n} candidate(s) per metric by "
                 f"{family.method}" + (f" and for the {looks} looks (x{looks})" if looks else ""))
    for m in METRICS:
        lines.append(f"  {m.upper()}  baseline {first.baseline[m]:.4f}; delta, {pct} interval (per candidate), "
                     "p (own test), family p (the larger of it and the pooled test), adjusted, verdict:")
        lines += [_row(i + 1, name, family.results[name], m) for i, name in enumerate(family.ranking(m))]
    return "\n".join(lines + sequential_lines(family.sequential) + cost_lines(family.cost))

