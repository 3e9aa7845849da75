"""A trial's work dir: its finished seeds' predictions, kept so that a killed trial resumes.

``trial(..., work_dir=W)`` keeps, as each pass ends (:mod:`fbrapids.app.trial_training`),
every seed it finished:

* ``W/trial.json``: what the trial is (the model and its inputs, the candidates'
  expressions, the arms, batch size, epochs, the stream's seed and the data's
  fingerprint: :func:`trial_identity`), written when the trial starts;
* ``W/held_out.npz``: the held-out rows' labels and groups, in the order every model
  predicted them;
* ``W/seeds/seed<S>.npz``: seed ``S``'s held-out predictions, one array per arm, with what
  its pass did (rows, steps, the training order's fingerprint).

Each file is written whole or not at all (a temporary name, fsync, rename:
:func:`fbrapids.files.atomic.write_atomic`).  ``resume=True`` continues from the seeds
there: it refuses (:class:`~fbrapids.errors.CheckpointMismatchError`, naming every
difference) a trial whose identity differs, and trains only the seeds missing, so a
killed trial loses the pass it was in (a pass trains one seed when its arms are more than
half of ``models_per_pass``: a 20-candidate trial loses at most one seed's work).  Without
``resume``, a work dir that holds another trial's seeds is refused rather than
overwritten.  The work dir is held by one trial at a time
(:func:`fbrapids.runs.workdir.lock_work_dir`).  A killed trial writes no result: the
verdicts come only from the finished trial.

Example:
    >>> import tempfile, numpy as np
    >>> from fbrapids.app.trial_training import SeedRun
    >>> d = tempfile.mkdtemp()
    >>> with TrialWorkDir(d, {"model": "dlrm", "data": "abc"}) as wd:
    ...     wd.save(SeedRun(0, {"baseline": np.array([0.2, 0.7])}, rows=10, steps=2), np.array([0, 1]), np.array([5, 6]))
    >>> with TrialWorkDir(d, {"model": "dlrm", "data": "abc"}, resume=True) as wd:
    ...     done = wd.finished([0, 1])
    >>> sorted(done), done[0].preds["baseline"].tolist(), wd.label.tolist()
    ([0], [0.2, 0.7], [0, 1])
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from fbrapids.errors import TrialError

if TYPE_CHECKING:
    from fbrapids.app.trial_training import SeedRun

log = logging.getLogger(__name__)

IDENTITY = "trial.json"
HELD_OUT = "held_out.npz"
SEEDS = "seeds"


def trial_identity(run_settings: Mapping[str, object], **trial: object) -> dict[str, object]:
    """What a resumed trial must share with the one it continues: the run's settings
    (:func:`fbrapids.app.pipeline.training_inputs`' ``run``: model, inputs, feature
    expressions, batch size, the stream's seed, the data's fingerprint) and the trial's own
    (arms, kind, epochs, ...).

    Example:
        >>> trial_identity({"model": "dlrm"}, arms=["baseline", "candidate"])
        {'model': 'dlrm', 'arms': ['baseline', 'candidate']}
    """
    return json.loads(json.dumps({**dict(run_settings), **trial}, default=str))


class TrialWorkDir:
    """The work dir ``path`` of a trial with ``identity`` (module docstring); a context
    manager holding the dir's lock."""

    def __init__(self, path: str | Path, identity: Mapping[str, object], resume: bool = False) -> None:
        self.path, self.identity, self.resume = Path(path), dict(identity), resume
        self.label = self.group = np.zeros(0)
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "TrialWorkDir":
        from fbrapids.files.atomic import write_atomic
        from fbrapids.runs.workdir import lock_work_dir

        self._stack.enter_context(lock_work_dir(self.path))
        recorded = self.path / IDENTITY
        if recorded.exists():
            self._check(recorded)
        else:
            if self.resume:
                log.info("trial: %s holds no trial to resume; starting one there", self.path)
            write_atomic(recorded, [json.dumps(self.identity, indent=1).encode()])
        held = self.path / HELD_OUT
        if held.exists():
            with np.load(held) as z:
                self.label, self.group = z["label"], z["group"]
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _check(self, recorded: Path) -> None:
        """Refuse a work dir that holds another trial, or this one without ``resume``."""
        from fbrapids.trainers.run_identity import check_identity

        found = json.loads(recorded.read_text())
        done = sorted(self._seed_files())
        if not self.resume:
            if done:
                raise TrialError(f"trial: {self.path} holds a trial's finished seeds ({', '.join(map(str, done))}); "
                                 "pass resume=True (--resume) to continue from them, or use another work dir")
            found = {}  # started, nothing finished: this trial starts over there
        if found:
            check_identity(found, self.identity, self.path / IDENTITY)
        else:
            from fbrapids.files.atomic import write_atomic

            write_atomic(self.path / IDENTITY, [json.dumps(self.identity, indent=1).encode()])

    def _seed_files(self) -> dict[int, Path]:
        folder = self.path / SEEDS
        out = {}
        for p in folder.glob("seed*.npz") if folder.is_dir() else []:
            with contextlib.suppress(ValueError):
                out[int(p.stem[4:])] = p
        return out

    def finished(self, seeds: Sequence[int]) -> dict[int, SeedRun]:
        """The :class:`~fbrapids.app.trial_training.SeedRun` of each of ``seeds`` kept here."""
        from fbrapids.app.trial_training import SeedRun

        files = self._seed_files()
        out = {}
        for s in seeds:
            if s in files:
                with np.load(files[s]) as z:
                    meta = json.loads(bytes(z["meta"]).decode())
                    preds = {k[4:]: z[k] for k in z.files if k.startswith("arm/")}
                out[s] = SeedRun(s, preds, int(meta["rows"]), int(meta["steps"]), str(meta["order"]))
        if out:
            log.info("trial: resuming from %d finished seed(s) in %s: %s", len(out), self.path,
                     ", ".join(map(str, sorted(out))))
        return out

    def save(self, run: SeedRun, label: np.ndarray, group: np.ndarray) -> None:
        """Keep ``run`` (a finished seed) and, the first time, the held-out labels and groups."""
        from fbrapids.files.atomic import write_atomic

        if not len(self.label) and not (self.path / HELD_OUT).exists():
            write_atomic(self.path / HELD_OUT, [_npz(label=label, group=group)])
            self.label, self.group = label, group
        (self.path / SEEDS).mkdir(exist_ok=True)
        meta = json.dumps({"seed": run.seed, "rows": run.rows, "steps": run.steps, "order": run.order}).encode()
        arrays = {f"arm/{k}": v for k, v in run.preds.items()}
        write_atomic(self.path / SEEDS / f"seed{run.seed}.npz", [_npz(meta=np.frombuffer(meta, np.uint8), **arrays)])


def _npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=True, **arrays)  # (numpy's default, named: its stubs type ** as this flag)
    return buf.getvalue()
