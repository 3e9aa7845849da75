"""Rich notebook displays (``_repr_html_``) of fbrapids results: tables and figures.

The objects keep their text forms (``render()``, ``repr``); these functions give what a
notebook shows instead.  Figures come from :mod:`fbrapids.ui.plot` as PNG images; where
matplotlib is not installed the tables are shown alone, with a note saying so.

Example:
    >>> print(table_html(["stage", "rows"], [["read", 1200], ["clean", 1100]]))
    <table class="fbrapids"><thead><tr><th>stage</th><th>rows</th></tr></thead><tbody><tr><td>read</td><td>1,200</td></tr><tr><td>clean</td><td>1,100</td></tr></tbody></table>
"""

from __future__ import annotations

import base64
import html
import io
import math
from typing import TYPE_CHECKING, Callable, Sequence

from fbrapids.errors import PlotUnavailableError

if TYPE_CHECKING:  # (annotations only: matplotlib is imported when a figure is drawn)
    from matplotlib.figure import Figure

    from fbrapids.ui.result_views import FamilyView, PipelineView, TrialView


def _cell(v: object) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:,.4f}"
    return html.escape(str(v))


def table_html(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """An HTML table (numbers formatted, text escaped)."""
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f'<table class="fbrapids"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def figure_html(fig: Figure, alt: str) -> str:
    """A matplotlib figure as an inline PNG ``<img>``.

    Example:
        >>> from fbrapids.ui.plot import stage_seconds
        >>> figure_html(stage_seconds({"a": 1.0}), "seconds")[:58]
        '<img class="fbrapids-figure" alt="seconds" src="data:image'
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img class="fbrapids-figure" alt="{html.escape(alt)}" src="data:image/png;base64,{data}"/>'


def _figure_or_note(make: Callable[[], Figure], alt: str) -> str:
    try:
        return figure_html(make(), alt)
    except PlotUnavailableError as exc:
        return f"<p><i>{html.escape(str(exc))}</i></p>"


def pipeline_html(result: PipelineView) -> str:
    """A pipeline run: rows per stage, seconds per stage (a bar chart), embedding-store hit
    rates per tier, the held-out metrics and the kernel counts."""
    from fbrapids.ui import plot

    parts = [f"<h4>fbrapids pipeline — backend {html.escape(str(result.backend))}, "
             f"model {html.escape(str(result.model))}</h4>",
             table_html(["stage", "rows"], list(result.rows.items()))]
    if result.seconds:
        parts.append(_figure_or_note(lambda: plot.stage_seconds(result.seconds), "seconds per stage"))
    tiers = [(t, s["hit_rate"], s["hits"], s["misses"], s["evictions"], s["bytes_moved"])
             for t, s in result.store.items() if isinstance(s, dict) and "hit_rate" in s]
    if tiers:
        parts.append(table_html(["store tier", "hit rate", "hits", "misses", "evictions", "bytes moved"], tiers))
    if result.metrics:
        parts.append(table_html(["held-out metric", "value"], list(result.metrics.items())))
    if result.kernel:
        parts.append(table_html(["feature extraction", "value"], list(result.kernel.items())))
    return '<div class="fbrapids-result">' + "".join(parts) + "</div>"


def trial_html(result: TrialView) -> str:
    """A feature trial: metrics per arm (averaged over the seeds), the deltas with their
    intervals (seeds + users), the verdicts, and the deltas as bars with error bars."""
    from fbrapids.ui import plot

    rows = []
    for m in ("auc", "gauc"):
        lo, hi = result.interval.get(m, (float("nan"), float("nan")))
        rows.append([m.upper(), result.baseline[m], result.candidate[m], result.delta[m], lo, hi,
                     result.p_better.get(m, float("nan")), result.verdict.get(m, ""),
                     result.aa_spread.get(m, float("nan"))])
    pct = f"{100 * result.level:g}%"
    counts = getattr(result, "rows", None) or {}
    split = (getattr(result, "split", None) or {}).get("rule")
    return ('<div class="fbrapids-trial">'
            f"<h4>feature trial: baseline + {html.escape(', '.join(result.candidates))} "
            f"({len(result.seeds)} seed(s) per arm, {result.n_boot} bootstrap rounds over {result.n_users:,} "
            "held-out users)</h4>"
            + (table_html(["rows", "count"], [*counts.items(), *([("split: held out", split)] if split else [])])
               if counts else "")
            + table_html(["metric", "baseline", "candidate", "delta", f"{pct} low", f"{pct} high", "P(better)",
                          "verdict", "A/A spread"], rows)
            + _figure_or_note(lambda: plot.trial_deltas(result), "trial deltas")
            + "</div>")



def family_html(family: FamilyView) -> str:
    """Many candidates against one baseline (``trial(..., each=True)``): per metric the
    candidates ranked by delta, with their intervals, p-values (own, family, adjusted) and
    verdicts, and every candidate's deltas as bars with error bars."""
    from fbrapids.ui import plot

    pct = f"{100 * next(iter(family.results.values())).level:g}%"
    tables = []
    for m in ("auc", "gauc"):
        rows = [[name, r.delta[m], r.interval[m][0], r.interval[m][1], r.p_value[m], r.p_family[m],
                 r.p_adjusted[m], r.verdict[m]] for name, r in ((n, family.results[n]) for n in family.ranking(m))]
        tables.append(f"<h5>{m.upper()}</h5>" + table_html(
            ["candidate", "delta", f"{pct} low", f"{pct} high", "p", "family p", "adjusted p", "verdict"], rows))
    return ('<div class="fbrapids-trial">'
            f"<h4>feature trial: {len(family.results)} candidates each against one baseline "
            f"({len(family.seeds)} seed(s) per arm, {family.n_boot} bootstrap rounds over {family.n_users:,} "
            f"held-out users; verdicts corrected by {html.escape(family.method)})</h4>"
            + "".join(tables)
            + _figure_or_note(lambda: plot.trial_deltas(family.results), "trial deltas")
            + "</div>")
