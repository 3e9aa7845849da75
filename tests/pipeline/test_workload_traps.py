"""A user's own log, trusted: the traps a user met with their own log, rebuilt as they were reported, each giving the
right answer or one clear line before any training (CPU backend, a few thousand rows).

* Avazu-style ``YYMMDDHH`` hours read as integers with ``last_day``: one line naming the field,
  the file and the values seen; declared as such (integers or text), the true last day is
  held out and a trial finds the planted column's "helps";
* epoch milliseconds: inferred (and said so), the last day held out, not its last 86.4 s;
* ``part_1`` .. ``part_10`` with ``fraction``: natural order (``part_10`` last), or the time
  column's; files whose times overlap refused, named;
* string times, a ``group`` typo, a header-only log, a split with nothing held out: one line,
  exit 2, before any work; a ``.toml`` path given to the Python API is read as the workload;
* a trial whose arms trained on 0 rows gives no verdict; its result carries the rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fbrapids import ops
from fbrapids.errors import FbrapidsError, TrialError, WorkloadError
from fbrapids.workloads import Split, View, Workload
from fbrapids.workloads.split_check import check_split

DAY = 86400
T0 = 1413849600  # 2014-10-21 00:00 UTC: Avazu's first hour, 14102100
LAST = "2014-10-28"  # the eighth day


def avazu_like(n: int = 4000, days: int = 8, seed: int = 0, beta: float = 1.5) -> pd.DataFrame:
    """``n`` impressions over ``days`` days, time ordered: ``hour`` as YYMMDDHH integers,
    ``ts`` epoch seconds, a ``planted`` column of 16 levels moving the click's logit by up to
    ``beta`` * 1.5, and a ``noise`` column."""
    rng = np.random.default_rng(seed)
    ts = T0 + np.sort(rng.integers(0, days * DAY, n))
    hour = pd.to_datetime(ts, unit="s", utc=True).strftime("%y%m%d%H").astype(int)
    user, ad, planted = rng.integers(0, 300, n), rng.integers(0, 40, n), rng.integers(0, 16, n)
    logit = -1.6 + beta * (planted - 7.5) / 5 + 0.3 * ((ad % 5) - 2)
    click = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    return pd.DataFrame({"click": click, "hour": np.asarray(hour), "ts": ts, "user": user, "ad": ad,
                         "planted": planted, "noise": rng.integers(0, 16, n)})


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("own-log")
    avazu_like().to_csv(d / "log.csv", index=False)
    return d


def workload_file(d: Path, body: str, log: str = "log.csv", name: str = "w.toml") -> Path:
    p = d / name
    p.write_text(f'name = "mine"\nlabel = "click"\n{body}\n[[views]]\nname = "log"\npath = "{log}"\n'
                 '[features]\nsparse = ["user", "ad"]\n')
    return p


def one_line(capsys, argv: list[str]) -> str:
    """``fbrapids ARGV`` run by its entry point in this process: exit 2, nothing on stdout, one
    line on stderr (returned)."""
    from fbrapids.app.cli import main

    capsys.readouterr()
    assert main(argv) == 2
    out = capsys.readouterr()
    lines = [ln for ln in out.err.splitlines() if ln.strip()]
    assert out.out == "" and len(lines) == 1, out.err
    return lines[0]


# -- time in its form ---------------------------------------------------------------------------
def test_yymmddhh_integers_undeclared_with_last_day_is_one_line_naming_field_file_and_values(log_dir, capsys):
    p = workload_file(log_dir, 'time = "hour"\ngroup = "user"\nsplit = { rule = "last_day" }', name="undeclared.toml")
    line = one_line(capsys, ["demo", "--workload", str(p), "--batch-size", "256"])
    assert line.startswith(f"fbrapids demo: workload 'mine' ({p}): time 'hour' in {log_dir / 'log.csv'}: the values "
                           "seen (14102100 .. 14102823) are not epoch seconds"), line
    assert 'time_form = "s" | "ms"' in line and '"%y%m%d%H" for YYMMDDHH' in line


@pytest.mark.parametrize("as_text", [False, True])
def test_yymmddhh_declared_holds_out_the_true_last_day(log_dir, as_text):
    frame = avazu_like()
    options = {"dtype": {"hour": "str"}} if as_text else {}
    w = Workload([View("log", "log.csv", options=options)], "click", Split("last_day"), time="hour",
                 time_form="%y%m%d%H", root=str(log_dir))
    c = check_split(w)
    last_day = frame["ts"] >= T0 + 7 * DAY
    assert c.rule == f"last day {LAST}" and c.held_rows == int(last_day.sum()) > 400
    assert c.train_rows == int((~last_day).sum()) and c.time_form.describe() == "text '%y%m%d%H'"
    assert (c.held_range[0] - T0) // DAY == 7 and c.train_range[1] < c.held_range[0]
    if as_text:  # the column read as UTC epoch seconds: ops.hour reads the hour of day from it
        from fbrapids.workloads import frames

        w = w.with_features({"hod": ops.hour("hour")})
        merged = frames.feature_frame(w, check=c)[0].compute()
        assert merged["hod"].tolist() == (frame["ts"] % DAY // 3600).tolist()
        assert merged["hour"].tolist() == (frame["ts"] // 3600 * 3600).tolist()


def test_a_trial_on_declared_yymmddhh_holds_out_the_last_day_and_finds_the_planted_column(log_dir):
    from fbrapids.app.trials import trial

    w = Workload([View("log", "log.csv")], "click", Split("last_day"), time="hour", time_form="%y%m%d%H",
                 group="user", sparse=["user", "ad"], root=str(log_dir))
    r = trial(w, {"planted_h": ops.hash_bucket("planted", 64)}, model="logreg", seeds=2, n_boot=50, aa=False,
              progress=False, batch_size=256, epochs=2)
    held = int((avazu_like()["ts"] >= T0 + 7 * DAY).sum())
    assert r.split["rule"] == f"last day {LAST}" and r.rows == {"trained": 4000 - held, "held out": held}
    assert r.verdict["auc"] == "helps" and r.interval["auc"][0] > 0.05, r.render()
    assert f"rows: trained {4000 - held:,}, held out {held:,} (last day {LAST})" in r.render()
    assert "<td>trained</td>" in r._repr_html_()


def test_milliseconds_are_inferred_and_the_last_day_held_out_not_its_last_86_seconds(tmp_path):
    frame = avazu_like(3000).assign(ts=lambda f: f["ts"] * 1000 + 7)
    frame.to_csv(tmp_path / "log.csv", index=False)
    w = Workload([View("log", "log.csv")], "click", Split("last_day"), time="ts", root=str(tmp_path))
    c = check_split(w)
    held = int((frame["ts"] // 1000 >= T0 + 7 * DAY).sum())
    assert c.time_form.name == "ms" and c.time_form.inferred and c.held_rows == held > 300
    assert "time 'ts' as epoch milliseconds (inferred from its values)" in c.render()
    with pytest.raises(WorkloadError, match=r"time 'ts' in .*log\.csv: read as epoch seconds, the values seen "
                                            r"\(14138\d+ \.\. \d+\) are the dates year \+46\d\d\d \.\. year "
                                            r"\+46\d\d\d, outside 1970-2099: is it another unit\?"):
        check_split(w.replace(time_form="s"))


# -- the log's files in order ------------------------------------------------------------------
def _parts(d: Path, times: list[int] | None = None) -> pd.DataFrame:
    """``part_1.csv`` .. ``part_10.csv``, 100 rows each (``part`` says which), written out of
    name order; ``times``: each file's first time (consecutive days by default)."""
    frames = []
    for k in range(1, 11):
        start = T0 + (times[k - 1] if times else (k - 1) * DAY)
        f = pd.DataFrame({"click": np.arange(100) % 2, "part": k, "ts": start + np.arange(100) * 60})
        f.to_csv(d / f"part_{k}.csv", index=False)
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def test_part_1_to_10_in_natural_order_with_fraction_holds_out_the_newest_part(tmp_path):
    from fbrapids.workloads import frames

    _parts(tmp_path)
    w = Workload([View("log", "part_*.csv")], "click", Split("fraction", fraction=0.1), root=str(tmp_path))
    c = check_split(w)
    assert [Path(f).name for f in c.files] == [f"part_{k}.csv" for k in range(1, 11)] and c.order == "name"
    assert "10 files in natural name order (part_1.csv, part_2.csv, part_3.csv, ..., part_9.csv, part_10.csv)" \
        in c.render()
    train, test = (f.compute() for f in frames.split_frame(w, frames.feature_frame(w, check=c)[0]))
    assert set(test["part"]) == {10} and len(test) == 100 and train["part"].tolist() == sorted(train["part"])


def test_files_are_ordered_by_their_time_and_a_fraction_over_overlapping_files_is_refused(tmp_path):
    # part_k's first day: names out of time order (part_2 is the oldest, part_1 the newest)
    frame = _parts(tmp_path, times=[d * DAY for d in (9, 0, 1, 2, 3, 4, 5, 6, 7, 8)])
    w = Workload([View("log", "part_*.csv")], "click", Split("fraction", fraction=0.1), time="ts", time_form="s",
                 root=str(tmp_path))
    c = check_split(w)
    assert c.order == "time" and Path(c.files[-1]).name == "part_1.csv" and Path(c.files[0]).name == "part_2.csv"
    assert c.held_range[0] == int(frame.loc[frame["part"] == 1, "ts"].min())
    _parts(tmp_path, times=[0, DAY, 2 * DAY, 3 * DAY, 4 * DAY, 5 * DAY, 6 * DAY, 7 * DAY, 8 * DAY, 8 * DAY + 3000])
    with pytest.raises(WorkloadError, match=r"split \(held out fraction 0.1\): the files' order disagrees with "
                                            r"their times: .*part_9\.csv reaches .* after .*part_10\.csv begins"):
        check_split(w)


# -- one line before any work ----------------------------------------------------------------
def test_string_times_iso_inferred_other_text_one_line(tmp_path, capsys):
    frame = avazu_like(2000)
    iso = pd.to_datetime(frame["ts"], unit="s").dt.strftime("%Y-%m-%d %H:%M:%S")
    frame.assign(when=iso).to_csv(tmp_path / "iso.csv", index=False)
    w = Workload([View("log", "iso.csv")], "click", Split("last_day"), time="when", root=str(tmp_path))
    c = check_split(w)
    assert c.time_form.name == "iso8601" and c.held_rows == int((frame["ts"] >= T0 + 7 * DAY).sum())
    frame.assign(when=pd.to_datetime(frame["ts"], unit="s").dt.strftime("%d/%m/%Y %H")).to_csv(
        tmp_path / "text.csv", index=False)
    p = workload_file(tmp_path, 'time = "when"\nsplit = { rule = "last_day" }', log="text.csv")
    line = one_line(capsys, ["demo", "--workload", str(p)])
    assert f"time 'when' in {tmp_path / 'text.csv'}: the values seen ('21/10/2014 00', " in line, line


def test_a_group_typo_a_header_only_log_and_nothing_held_out_are_one_line_each(log_dir, tmp_path, capsys):
    p = workload_file(log_dir, 'group = "usr"\nsplit = { rule = "fraction", fraction = 0.2 }', name="typo.toml")
    line = one_line(capsys, ["demo", "--workload", str(p)])
    assert line.startswith(f"fbrapids demo: group 'usr' is neither a column of the views in {p} nor an extracted "
                           "feature"), line
    (tmp_path / "header.csv").write_text("click,user,ad\n")
    p = workload_file(tmp_path, 'group = "user"\nsplit = { rule = "fraction", fraction = 0.2 }', log="header.csv")
    line = one_line(capsys, ["trial", "--workload", str(p), "--candidate", "x=ops.hash_bucket('ad', 8)"])
    assert line == (f"fbrapids trial: workload 'mine' ({p}): view 'log': header.csv hold no rows (empty, or a header "
                    "only)"), line
    p = workload_file(log_dir, 'time = "ts"\nsplit = { rule = "at", at = "2015-01-01" }', name="none.toml")
    line = one_line(capsys, ["demo", "--workload", str(p)])
    assert f"({p}): split (held out at 2015-01-01) holds out no rows: all 4,000 rows of view 'log' train" in line


@pytest.mark.parametrize("split, says", [
    (Split("at", at=T0 + 1), "leaves no training rows"),
    (Split("at", at=T0 + 8 * DAY - 600), "under the floor of 40"),
])
def test_splits_that_cannot_be_right_are_refused_naming_the_rule(log_dir, split, says):
    w = Workload([View("log", "log.csv")], "click", split, time="ts", root=str(log_dir))
    with pytest.raises(WorkloadError, match=rf"split \(held out at 2014-10-\d\d.*\) .*{says}"):
        check_split(w)


def test_a_held_out_set_of_one_class_is_refused(tmp_path):
    frame = avazu_like(2000)
    frame.loc[frame["ts"] >= T0 + 7 * DAY, "click"] = 0
    frame.to_csv(tmp_path / "log.csv", index=False)
    w = Workload([View("log", "log.csv")], "click", Split("last_day"), time="ts", root=str(tmp_path))
    with pytest.raises(WorkloadError, match=r"held-out rows all have label 'click' = 0: AUC is undefined"):
        check_split(w)


def test_a_toml_path_given_to_the_python_api_is_read_as_the_workload(log_dir, tmp_path):
    from fbrapids.app.pipeline import run_pipeline
    from fbrapids.datasets.synthetic import as_workload

    p = workload_file(log_dir, 'time = "ts"\nsplit = { rule = "at", at = "2015-01-01" }', name="api.toml")
    assert as_workload(str(p)).name == "mine" and as_workload(p).source == str(p)
    with pytest.raises(WorkloadError, match=r"\(api\.toml\)|api\.toml\): split \(held out at 2015-01-01\) holds out"):
        run_pipeline(p, progress=False)  # read as the workload it declares, refused by its split
    with pytest.raises(WorkloadError, match=r"log\.csv is a file: give a workload \(load_workload"):
        as_workload(log_dir / "log.csv")


def test_a_trial_whose_arms_trained_on_no_rows_gives_no_verdict(log_dir):
    from fbrapids.app.trials import trial

    cut = T0 + 7 * DAY  # the log's cleaning drops every training row: the split's check saw them
    w = Workload([View("log", "log.csv", clean={"where": f"ts >= {cut}"})], "click", Split("last_day"), time="ts",
                 group="user", sparse=["user"], root=str(log_dir))
    with pytest.raises(TrialError, match=r"no verdict: the arms trained on 0 rows and were judged on \d+ held-out "
                                         rf"rows \(split: held out last day {LAST}, after cleaning and joins\)"):
        trial(w, {"ad_h": ops.hash_bucket("ad", 64)}, model="logreg", seeds=1, n_boot=5, aa=False, progress=False,
              batch_size=256)
    assert issubclass(TrialError, FbrapidsError)
