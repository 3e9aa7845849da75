"""The ``fbrapids`` command line: ``fbrapids gen``, ``fbrapids demo``, ``fbrapids export``,
``fbrapids serve``, ``fbrapids cache`` and ``fbrapids trial``.

Arguments are checked before any heavy import (pandas, torch, dask): a wrong path, a GPU
backend this machine cannot run, a ``--data-dir`` of other data or a scheduler address
where nothing listens fail in well under a second, on one line.

Example:
    >>> args = build_parser().parse_args(["gen", "--rows", "1000", "--out", "data"])
    >>> args.command, args.rows, args.seed
    ('gen', 1000, 0)
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Sequence, TextIO

from fbrapids.errors import FbrapidsError, UsageError
from fbrapids.workloads.run_config import MODELS, ModelNames

if TYPE_CHECKING:
    from fbrapids.workloads import Workload


def _gen(args: argparse.Namespace) -> int:
    import fcntl

    from fbrapids.datasets.synthetic.generate import generate, read_metadata

    plant = dict(args.plant or [])
    args.out.mkdir(parents=True, exist_ok=True)
    fd = os.open(args.out, os.O_RDONLY)  # two `gen --out` into one folder take turns: never a mixed set
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        paths = generate(args.rows, args.out, seed=args.seed, row_group_rows=args.row_group_rows, progress=None,
                         plant=plant)
    finally:
        os.close(fd)
    meta = read_metadata(args.out)
    sys.stdout.write(
        f"wrote {', '.join(p.name for p in paths.values())} to {args.out} "
        f"({args.rows:,} impressions, CTR {meta['ctr']:.3f}, oracle AUC {meta['oracle_auc']:.4f})\n"
    )
    for name, info in (meta.get("plant") or {}).items():
        sys.stdout.write(f"  planted {name}: beta {info['beta']:g}, oracle AUC gain {info['oracle_auc_gain']:+.4f}\n")
    return 0


def _plant_arg(text: str) -> tuple[str, float]:
    """``NAME=BETA`` of ``fbrapids gen --plant``.

    Example:
        >>> _plant_arg("p_noise=0")
        ('p_noise', 0.0)
    """
    name, sep, beta = text.partition("=")
    try:
        if not sep or not name:
            raise ValueError
        return name, float(beta)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=BETA (e.g. p_noise=0 or p_real=0.5), got {text!r}") from None


def _memory_limit(text: str) -> str:
    """``--memory-limit``: checked here (an argparse error naming it), passed on as given."""
    from fbrapids.errors import MemoryBudgetError
    from fbrapids.runs.memory_budget import parse_memory_limit

    try:
        parse_memory_limit(text)
    except MemoryBudgetError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _demo(args: argparse.Namespace) -> int:
    if args.workload is not None:
        return _demo_workload(args)
    if args.nproc > 1 or (args.resume and _sharded(args.work_dir)):
        return _demo_ranks(args)
    from fbrapids.app.demo import run_demo

    result = run_demo(rows=args.rows, data_dir=args.data_dir, backend=args.backend, model=args.model,
                      scheduler=args.scheduler, seed=args.seed, work_dir=args.work_dir,
                      batch_size=args.batch_size, checkpoint_every=args.checkpoint_every, resume=args.resume,
                      export=args.export, nan=args.nan, tiers=args.tiers, tune=args.tune,
                      memory_limit=args.memory_limit)
    sys.stdout.write(result.render() + "\n")
    if args.summary_json is not None:
        import json

        from fbrapids.app.demo import default_data_dir
        from fbrapids.datasets.synthetic.generate import read_metadata

        data = args.data_dir if args.data_dir is not None else default_data_dir(args.rows, args.seed)
        summary = {**result.summary(), "data": read_metadata(data)}
        args.summary_json.write_text(json.dumps(summary, indent=1) + "\n")
    if result.oracle_auc is not None:
        sys.stdout.write(f"  (the generator's hidden model reaches AUC {result.oracle_auc:.4f} on all days; "
                         "a model reaching >= 0.65 on the held-out day has learned the signal)\n")
    return 0


def _workload(args: argparse.Namespace) -> Workload:
    from fbrapids.workloads import load_workload

    return load_workload(args.workload, root=args.data_root)


def _demo_workload(args: argparse.Namespace) -> int:
    """``demo --workload FILE``: the pipeline on a declared workload (a TOML file); with
    ``--export DIR`` its model exported for serving, its spec from the workload."""
    import contextlib
    import json

    from fbrapids.app.pipeline import run_pipeline
    from fbrapids.workloads import RunConfig

    w = _workload(args)
    if args.export is not None:
        from fbrapids.app.workload_export import check_exportable

        check_exportable(w, args.model)  # a model no request can feed: refused before training
    backend = None if args.backend in (None, "auto") else args.backend
    with contextlib.ExitStack() as stack:
        work = args.work_dir
        if work is None and args.export is not None:  # the checkpoint lives until it is exported
            from fbrapids.app.demo import WORK_PREFIX
            from fbrapids.runs.workdir import temporary_work_dir

            work = stack.enter_context(temporary_work_dir(WORK_PREFIX))
        config = RunConfig(model=args.model, backend=backend, seed=args.seed, work_dir=work,
                           batch_size=args.batch_size, checkpoint_every=args.checkpoint_every, resume=args.resume,
                           nan=args.nan, tiers=args.tiers, tune=args.tune, memory_limit=args.memory_limit)
        client = None
        if args.scheduler:
            from fbrapids.frames.cluster import close_client, connect

            client = connect(args.scheduler)
            stack.callback(close_client, client)
        result = run_pipeline(w, config, client=client)
        if args.export is not None:
            from fbrapids.app.workload_export import export_workload_checkpoint

            if not result.checkpoint:
                from fbrapids.errors import CheckpointError

                raise CheckpointError("the run left no checkpoint to export")
            result.export = str(export_workload_checkpoint(result.checkpoint, args.export, w, model=args.model,
                                                           seed=args.seed))
            if args.work_dir is None:
                result.removed_work_dir, result.checkpoint = str(work), None  # removed on leaving this block
    sys.stdout.write(result.render() + "\n")
    if args.summary_json is not None:
        summary = {**result.summary(), "workload": w.name, "workload_file": str(args.workload)}
        args.summary_json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


def _trial(args: argparse.Namespace) -> int:
    """``fbrapids trial --workload FILE --candidate NAME=EXPR ...``: prints the trial's table,
    writes its JSON (only once the trial has finished: a killed trial leaves none)."""
    import dataclasses
    import json

    from fbrapids.app.trials import trial
    from fbrapids.workloads import parse_candidate

    candidates = dict(parse_candidate(c) for c in args.candidate)  # refused as parsed, before the workload is read
    w = _workload(args) if args.workload is not None else _default_data_workload(args.rows, args.seed)
    out = args.json if args.json is not None else Path(f"{w.name}-trial.json")
    _new_file("--json", out, args.force)  # before the trial's work: another run's file is never overwritten
    backend = None if args.backend in (None, "auto") else args.backend
    options = {"work_dir": args.work_dir} if args.work_dir is not None else {}
    if args.models_per_pass is not None:
        options["models_per_pass"] = args.models_per_pass
    result = trial(w, candidates, kind=args.kind, model=args.model, seeds=args.seeds, n_boot=args.n_boot,
                   seed=args.seed, level=args.level, progress=not args.no_progress, backend=backend,
                   epochs=args.epochs, batch_size=args.batch_size, embedding_dim=args.embedding_dim, each=args.each,
                   correction=args.correction, min_effect=args.min_effect, aa=not args.no_aa, resume=args.resume,
                   reference=args.reference, **options)
    sys.stdout.write(result.render() + "\n")
    body = result.as_dict() if args.each else dataclasses.asdict(result)
    data = {"workload": w.name, "workload_file": None if args.workload is None else str(args.workload),
            "rows": None if args.workload is not None else args.rows, "model": args.model, "kind": args.kind,
            **body, "expressions": {k: str(v) for k, v in candidates.items()}}
    text = json.dumps(data, indent=1, default=lambda v: v.item() if hasattr(v, "item") else str(v)) + "\n"
    sys.stdout.write(f"trial JSON written to {write_new_file(out, text.encode(), args.force)}\n")
    return 0


def _default_data_workload(rows: int, seed: int) -> Workload:
    """The demo's default data of ``rows`` impressions drawn with ``seed`` (generated once, as
    ``fbrapids demo`` does) as its workload."""
    from fbrapids.datasets import synthetic
    from fbrapids.datasets.synthetic.generate import ensure_dataset
    from fbrapids.runs.data_cache import default_data_dir

    return synthetic.workload(ensure_dataset(rows, default_data_dir(rows, seed), seed=seed))


def _file_in_a_directory(flag: str, path: Path | None) -> None:
    """A usage error when ``path`` (a file to write) is a directory or lies in none that exists."""
    if path is not None and (path.is_dir() or not path.parent.is_dir()):
        raise UsageError(f"argument {flag}: {path} " + ("is a directory" if path.is_dir() else
                                                        "is in no existing directory"))


def _new_file(flag: str, path: Path, force: bool) -> None:
    """A usage error when ``path`` exists (another run's output) and ``force`` is not given."""
    if not force and (path.exists() or path.is_symlink()):
        raise UsageError(f"argument {flag}: {path} already exists (another run's output): pass --force to overwrite it, "
                         f"or choose another {flag}")


def write_new_file(path: Path, data: bytes, force: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically (a temporary file renamed, or linked, into place),
    never over a file another run wrote meanwhile unless ``force``: that is an error naming
    it, and this run's output is kept beside it (its name in the error).  Returns ``path``.

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "t.json"
        >>> write_new_file(p, b"{}") == p, p.read_bytes()
        (True, b'{}')
        >>> try:
        ...     write_new_file(p, b"[]")
        ... except UsageError as exc:
        ...     print(str(exc).replace(str(p), "P").split(": this")[0], p.read_bytes())
        P was written by another run meanwhile b'{}'
    """
    import tempfile

    from fbrapids.files.atomic import write_atomic

    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = write_atomic(Path(name), [data])
    if force:
        os.replace(tmp, path)
        return path
    try:
        try:
            os.link(tmp, path)  # fails if the file exists: no check-then-write race with another run
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links: the name reserved, then replaced
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            os.replace(tmp, path)
            return path
    except FileExistsError:
        kept = tmp.rename(path.with_name(f"{path.name}.{os.getpid()}"))
        raise UsageError(f"{path} was written by another run meanwhile: this run's is {kept} (pass --force to "
                         "overwrite)") from None
    tmp.unlink()
    return path


def _sharded(work_dir: Path | None) -> bool:
    """Whether ``work_dir`` holds the checkpoints of a run on several ranks (resumed with them)."""
    from fbrapids.app.demo_distributed import is_sharded_work_dir

    return work_dir is not None and is_sharded_work_dir(work_dir)


def _demo_ranks(args: argparse.Namespace) -> int:
    """``demo --nproc N``, or ``--resume`` of a work dir ranks trained (at the N given, 1 included)."""
    from fbrapids.app.demo_distributed import render, run_distributed_demo, summary

    results = run_distributed_demo(args.nproc, rows=args.rows, data_dir=args.data_dir, work_dir=args.work_dir,
                                   backend=args.backend, model=args.model, scheduler=args.scheduler, seed=args.seed,
                                   batch_size=args.batch_size, checkpoint_every=args.checkpoint_every,
                                   resume=args.resume, nan=args.nan,
                                   dist_backend=None if args.dist_backend == "auto" else args.dist_backend)
    sys.stdout.write(render(results) + "\n")
    if args.summary_json is not None:
        import json

        from fbrapids.app.demo import default_data_dir
        from fbrapids.datasets.synthetic.generate import read_metadata

        data = args.data_dir if args.data_dir is not None else default_data_dir(args.rows, args.seed)
        args.summary_json.write_text(json.dumps({**summary(results), "data": read_metadata(data)}, indent=1) + "\n")
    return 0


def _export(args: argparse.Namespace) -> int:
    key = _signing_key(args.signing_key_file)
    if args.workload is not None:  # a run on a declared workload: its spec from the workload
        from fbrapids.app.workload_export import export_workload_checkpoint

        out = export_workload_checkpoint(args.checkpoint, args.out, _workload(args), model=args.model,
                                         embedding_dim=args.embedding_dim, seed=args.seed, signing_key=key)
    else:
        from fbrapids.app.demo_export import export_demo_checkpoint

        out = export_demo_checkpoint(args.checkpoint, args.out, model=args.model, embedding_dim=args.embedding_dim,
                                     seed=args.seed, signing_key=key)
    sys.stdout.write(f"exported {args.checkpoint} to {out} (serve it: fbrapids serve {out})\n")
    return 0


def _signing_key(path: Path | None) -> bytes | None:
    """The HMAC key of ``--signing-key-file``, else ``$FBRAPIDS_SIGNING_KEY``, else None."""
    from fbrapids.serving.signing import signing_key

    return signing_key(path)


def _serve(args: argparse.Namespace) -> int:
    from fbrapids.serving.guard import ServeLimits
    from fbrapids.serving.http import serve

    if args.token is not None:
        from fbrapids.serving.http import check_token

        check_token(args.token)  # refused before the warning: one line
        logging.getLogger("fbrapids.app.cli").warning(
            "--token is visible to every user of this machine (ps, /proc); use --token-file or $FBRAPIDS_SERVE_TOKEN")
    limits = ServeLimits(max_body_bytes=args.max_body_bytes, body_timeout_s=args.body_timeout,
                         header_timeout_s=args.header_timeout, max_connections=args.max_connections)
    serve(args.export_dir, args.host, args.port, token=args.token, insecure=args.insecure,
          token_file=args.token_file, allow_hosts=args.allow_host, limits=limits,
          signing_key=_signing_key(args.signing_key_file), cache_items=args.cache_items,
          cache_bytes=args.cache_bytes, max_items=args.max_items, max_requests=args.max_requests,
          chunk_items=args.chunk_items)
    return 0


def _cache(args: argparse.Namespace) -> int:
    from fbrapids.runs import data_cache

    root = data_cache.data_root()
    if args.clear:
        removed, freed = data_cache.clear(root)
        sys.stdout.write(f"removed {len(removed)} data set(s) from {root} ({freed / 2**20:,.1f} MiB)\n")
        return 0
    folders = data_cache.demo_folders(root)
    sizes = [data_cache.folder_bytes(f) for f in folders]
    for f, size in zip(folders, sizes):
        sys.stdout.write(f"{size / 2**20:10,.1f} MiB  {f}\n")
    sys.stdout.write(f"{len(folders)} data set(s) in {root}, {sum(sizes) / 2**20:,.1f} MiB of at most "
                     f"{data_cache.cache_cap() / 2**20:,.0f} MiB ({data_cache.CAP_ENV}); "
                     "`fbrapids cache --clear` removes them\n")
    return 0


def _float_above(lo: float) -> Callable[[str], float]:
    """An argparse type: a number greater than ``lo``.

    Example:
        >>> _float_above(0)("2.5")
        2.5
    """

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not v > lo:
            raise argparse.ArgumentTypeError(f"must be greater than {lo}, got {text}")
        return v

    return parse


def _int_in(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in ``[lo, hi]`` (a usage error otherwise).

    Example:
        >>> _int_in(1)("0")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: 0 is out of range: expected an integer >= 1
    """

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"{v} is out of range: expected an integer "
                                             + (f">= {lo}" if hi is None else f"in [{lo}, {hi}]"))
        return v

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


MIN_ROWS = 100  #: the generator's smallest data (fbrapids.datasets.synthetic.generate.generate)
SEED_MAX = 2**32 - 1
BACKENDS = ("auto", "cpu", "gpu")  #: fbrapids.frames.backend's names, checked here before any import of it
BACKEND_ENV = "FBRAPIDS_BACKEND"


def _usage_line(prog: str, message: str) -> str:
    return f"{prog}: {message} (see {prog} --help)\n"


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line: ``fbrapids demo: argument --seed: ...``, and
    no abbreviations (``--row 1000`` is an error, not ``--rows 1000``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(_usage_line(self.prog, message))
        raise SystemExit(2)


def _not_a_file(flag: str, path: Path | None, empty: bool = False) -> None:
    """A usage error unless ``path`` is absent, or a directory (an empty one with ``empty``)."""
    if path is None or not (path.exists() or path.is_symlink()):
        return
    if not path.is_dir():
        raise UsageError(f"argument {flag}: {path} is a file, not a directory")
    if empty and any(path.iterdir()):
        raise UsageError(f"argument {flag}: {path} is not empty (an export is written into a new or empty "
                         "directory)")


def _check_nproc(args: argparse.Namespace) -> None:
    """``demo --nproc N`` (N > 1): what several local ranks cannot do, refused before any work."""
    if args.export:
        raise UsageError("argument --nproc: --export is not supported with several ranks (export a one-process "
                         "run's checkpoint)")
    if args.batch_size % args.nproc:
        raise UsageError(f"argument --nproc: the global --batch-size {args.batch_size} is not divisible by "
                         f"{args.nproc} ranks")
    if args.tune:
        raise UsageError("argument --tune: not with --nproc (a tuning trains its models in one process: tune once, "
                         "then train on ranks)")
    if args.memory_limit is not None:
        raise UsageError("argument --nproc: --memory-limit is not supported with several ranks (each rank holds its "
                         "own tables; a one-process run takes it)")


def _writable(flag: str, path: Path | None) -> None:
    """A usage error when ``path`` (or, while absent, its nearest existing parent) cannot be
    written (a read-only file system, no permission)."""
    if path is None:
        return
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        why = "on a read-only file system" if _read_only(probe) else "not writable by this user"
        raise UsageError(f"argument {flag}: {probe} is {why}" + (f" (needed to create {path})" if probe != path else ""))


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


SCHEDULER_SCHEMES = ("tcp", "tls", "ws", "wss")  #: what ``--scheduler`` can reach from this process


def _scheduler_address(address: str) -> None:
    """A usage error for a ``--scheduler`` address this process cannot connect to, naming
    it: an unknown scheme, ``inproc://`` (another process's memory), ``tls://`` / ``wss://``
    without dask's TLS settings, ``ucx://`` without its package, and a host:port where
    nothing listens (the connection refused) or whose host does not resolve.

    Example:
        >>> _scheduler_address("tcp://127.0.0.1:1")  # refused at once, not after dask's 30 s
        Traceback (most recent call last):
        ...
        fbrapids.errors.UsageError: argument --scheduler: nothing listens at tcp://127.0.0.1:1 (connection refused): start the scheduler first (`dask scheduler` listens on 8786), or check the host and port
        >>> _scheduler_address("inproc://10.0.0.1/1/1")
        Traceback (most recent call last):
        ...
        fbrapids.errors.UsageError: argument --scheduler: inproc://10.0.0.1/1/1 is an in-process address, reachable only from inside the process that made it; give the scheduler's tcp://host:port
    """
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    scheme = scheme.lower()
    flag = "argument --scheduler"
    if scheme == "inproc":
        raise UsageError(f"{flag}: {address} is an in-process address, reachable only from inside the process that "
                         "made it; give the scheduler's tcp://host:port")
    if scheme == "ucx":
        import importlib.util

        if importlib.util.find_spec("distributed_ucxx") is None:
            raise UsageError(f"{flag}: {address}: ucx:// needs the distributed-ucxx package, which is not installed; "
                             "use tcp://host:port")
        return
    if scheme not in SCHEDULER_SCHEMES:
        raise UsageError(f"{flag}: {address} has scheme {scheme}://, expected one of "
                         f"{', '.join(s + '://' for s in SCHEDULER_SCHEMES)} (or host:port)")
    host, _, port = rest.rstrip("/").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"{flag}: {address} is not {scheme}://host:port")
    if scheme in ("tls", "wss"):
        import dask

        tls = dask.config.get("distributed.comm.tls", {}) or {}
        client = tls.get("client") or {}
        if not (tls.get("ca-file") and client.get("cert")):
            raise UsageError(f"{flag}: {address} needs TLS settings, and none are set: give dask config "
                             "distributed.comm.tls.ca-file and distributed.comm.tls.client.cert (/ .key), e.g. "
                             "DASK_DISTRIBUTED__COMM__TLS__CA_FILE=ca.pem DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT="
                             "cert.pem")
    if scheme in ("ws", "wss"):
        import importlib.util

        if importlib.util.find_spec("websockets") is None:
            raise UsageError(f"{flag}: {address}: ws:// needs the websockets package, which is not installed")
    _listening(flag, address, host.strip("[]"), int(port))


def _listening(flag: str, address: str, host: str, port: int, timeout: float = 3.0) -> None:
    """A usage error, at once, when nothing listens at ``host:port`` (the connection is
    refused) or the host name does not resolve; a slow or unreachable host is left to
    the client's own timeout."""
    import socket

    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except ConnectionRefusedError:
        raise UsageError(f"{flag}: nothing listens at {address} (connection refused): start the scheduler first "
                         "(`dask scheduler` listens on 8786), or check the host and port") from None
    except socket.gaierror as exc:
        raise UsageError(f"{flag}: {address}: the host {host!r} does not resolve ({exc.strerror})") from None
    except OSError:
        pass


def _backend_here(name: str | None) -> None:
    """``--backend gpu`` (or ``FBRAPIDS_BACKEND=gpu``) on a machine where the GPU backend
    cannot run: its :class:`~fbrapids.errors.BackendUnavailableError`, asked of the
    packages and the driver without importing pandas, cudf or torch."""
    if name is None or name.strip().lower() != "gpu":
        return
    from fbrapids.errors import BackendUnavailableError
    from fbrapids.frames.gpu_probe import gpu_missing, gpu_unavailable_message

    missing = gpu_missing()
    if missing:
        raise BackendUnavailableError(gpu_unavailable_message(missing))


def check_arguments(args: argparse.Namespace) -> None:
    """The checks argparse's types cannot make (paths, the environment), made before any
    work; each failure is a :class:`UsageError` naming the argument (:func:`main` prints it
    as one line and returns 2).

    Example:
        >>> check_arguments(build_parser().parse_args(["gen", "--out", "data"]))  # nothing to refuse
        >>> check_arguments(build_parser().parse_args(["demo", "--resume"]))
        Traceback (most recent call last):
        ...
        fbrapids.errors.UsageError: argument --resume: needs --work-dir, the work dir of the run to continue
        >>> check_arguments(build_parser().parse_args(["demo", "--tune", "--nproc", "2"]))
        Traceback (most recent call last):
        ...
        fbrapids.errors.UsageError: argument --tune: not with --nproc (a tuning trains its models in one process: tune once, then train on ranks)
        >>> check_arguments(build_parser().parse_args(["trial", "--candidate", "c=ops.col('slot')", "--data-root", "d"]))
        Traceback (most recent call last):
        ...
        fbrapids.errors.UsageError: argument --data-root: only with --workload
    """
    env = os.environ.get(BACKEND_ENV)
    if (args.command != "gen" and getattr(args, "backend", None) is None and env is not None
            and env.strip().lower() not in BACKENDS):
        raise UsageError(f"environment variable {BACKEND_ENV}: {env!r} is not a backend (expected one of "
                         f"{', '.join(BACKENDS)}; unset it for automatic)")
    if args.command == "gen":
        _not_a_file("--out", args.out)
    elif args.command == "trial":
        _check_trial_arguments(args, env)
    elif args.command == "demo":
        if args.workload is not None:
            if not args.workload.is_file():
                raise UsageError(f"argument --workload: {args.workload} is not a file")
            for flag, given in (("--data-dir", args.data_dir is not None), ("--nproc", args.nproc > 1)):
                if given:
                    raise UsageError(f"argument {flag}: not with --workload (the workload file says what is read)")
        elif args.data_root is not None:
            raise UsageError("argument --data-root: only with --workload")
        _not_a_file("--data-dir", args.data_dir)
        _backend_here(args.backend if args.backend is not None else env)
        if args.data_dir is not None:
            from fbrapids.runs.data_cache import check_data_dir

            check_data_dir(args.data_dir, args.rows, args.seed)
        _not_a_file("--work-dir", args.work_dir)
        _not_a_file("--export", args.export, empty=True)
        _file_in_a_directory("--summary-json", args.summary_json)
        if args.resume and args.work_dir is None:
            raise UsageError("argument --resume: needs --work-dir, the work dir of the run to continue")
        if args.nproc > 1:
            _check_nproc(args)
        elif args.dist_backend != "auto" and not args.resume:
            raise UsageError(f"argument --dist-backend: {args.dist_backend} is for ranks (--nproc N, N > 1)")
        _writable("--work-dir", args.work_dir)
        _writable("--export", args.export)
        if args.scheduler is not None:
            _scheduler_address(args.scheduler)
    elif args.command == "export":
        if not args.checkpoint.exists():
            raise UsageError(f"argument checkpoint: {args.checkpoint} does not exist")
        if args.workload is not None and not args.workload.is_file():
            raise UsageError(f"argument --workload: {args.workload} is not a file")
        if args.data_root is not None and args.workload is None:
            raise UsageError("argument --data-root: only with --workload")
        _not_a_file("out", args.out, empty=True)
    elif args.command == "serve" and not args.export_dir.is_dir():
        raise UsageError(f"argument export_dir: {args.export_dir} "
                         + ("is a file, not an export directory" if args.export_dir.exists() else "does not exist"))


def _check_trial_arguments(args: argparse.Namespace, env: str | None) -> None:
    """:func:`check_arguments` of ``trial`` (``env``: ``$FBRAPIDS_BACKEND``)."""
    if args.workload is not None and not args.workload.is_file():
        raise UsageError(f"argument --workload: {args.workload} is not a file")
    if args.workload is None and args.data_root is not None:
        raise UsageError("argument --data-root: only with --workload")
    _backend_here(args.backend if args.backend is not None else env)
    _file_in_a_directory("--json", args.json)
    if args.json is not None:
        _new_file("--json", args.json, args.force)
    if args.resume and args.work_dir is None:
        raise UsageError("argument --resume: needs --work-dir, the work dir of the trial to continue")
    _not_a_file("--work-dir", args.work_dir)
    _writable("--work-dir", args.work_dir)


def build_parser() -> argparse.ArgumentParser:
    """The ``fbrapids`` command line: a subcommand each for ``gen``, ``demo``, ``trial``,
    ``export``, ``cache`` and ``serve`` (:func:`main` parses with it).

    Example:
        >>> build_parser().parse_args(["gen", "--out", "d", "--rows", "5000"]).rows
        5000
    """
    parser = _Parser(prog="fbrapids", description="FeatureBox on RAPIDS")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_gen, _add_demo, _add_trial, _add_export, _add_cache, _add_serve):
        add(sub)
    return parser


def _add_gen(sub: argparse._SubParsersAction) -> None:
    """Add the ``gen`` subcommand to ``sub``: write the seeded default data."""
    gen = sub.add_parser("gen", help="write the seeded default ads log (four parquet files)")
    gen.add_argument("--rows", type=_int_in(MIN_ROWS), default=200_000, help="impressions to generate")
    gen.add_argument("--out", type=Path, required=True, help="output directory")
    gen.add_argument("--seed", type=_int_in(0, SEED_MAX), default=0)
    gen.add_argument("--row-group-rows", type=_int_in(1), default=32_768,
                     help="rows per parquet row group, i.e. per dask partition (the data does not depend on it)")
    gen.add_argument("--plant", type=_plant_arg, action="append", metavar="NAME=BETA",
                     help="add an impressions column of 16 levels moving the hidden logit by BETA*z, z in "
                          "[-1.5, 1.5] (BETA=0: pure noise); its oracle AUC gain goes into the metadata; repeatable")
    gen.set_defaults(func=_gen)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    """Add the ``demo`` subcommand to ``sub``: the pipeline on the default data or a workload."""
    demo = sub.add_parser(
        "demo", help="run the FeatureBox pipeline on the embedded default data",
        description="Run the FeatureBox pipeline on the embedded default data. Nothing is left behind unasked: "
                    "without --work-dir the run works in a temporary fbrapids-demo-* folder under $TMPDIR, removed "
                    "on every exit (completed, failed, Ctrl-C, SIGTERM; a killed run's folder is removed by the next "
                    "demo). Keep the trained model with --export DIR, or the whole work dir with --work-dir DIR.")
    demo.add_argument("--rows", type=_int_in(MIN_ROWS), default=200_000, help="impressions in the default data")
    demo.add_argument("--data-dir", type=Path, default=None,
                      help="where the default data is generated and kept (default ~/.cache/fbrapids/data)")
    demo.add_argument("--backend", choices=("auto", "cpu", "gpu"), default=None)
    demo.add_argument("--model", default="dlrm", type=MODELS.argument("dlrm"), metavar="MODEL",
                      help="a registered model's short name (an unknown one is refused with the list); din: "
                           "attention over the user's last 50 clicked categories, built from the log by history; "
                           "dcn: DCN-v2 (a cross network)")
    demo.add_argument("--tune", action="store_true",
                      help="choose the learning rates, weight decay, dropout and epochs on the data first: the last "
                           "training day held out as a validation day, a small grid tried on the days before it "
                           "(the summary lists each try), then the model trained on every training day with the "
                           "choice (about a dozen models' training more)")
    demo.add_argument("--work-dir", type=Path, default=None,
                      help="keep the embedding store's SSD files and the checkpoints here (default: a temporary "
                           "folder, removed at exit)")
    demo.add_argument("--batch-size", type=_int_in(1), default=2048)
    demo.add_argument("--checkpoint-every", type=_int_in(1), default=None, help="also checkpoint every N steps")
    demo.add_argument("--resume", action="store_true",
                      help="continue from the newest verified checkpoint in --work-dir (skips the batches it trained; "
                           "a work dir of --nproc ranks continues at the row it reached, on the --nproc given, 1 "
                           "included); another --batch-size, data or model is refused")
    demo.add_argument("--scheduler", default=None, help="dask scheduler address (default: a local cluster)")
    demo.add_argument("--seed", type=_int_in(0, SEED_MAX), default=0)
    demo.add_argument("--nproc", type=_int_in(1, 64), default=1,
                      help="train on N local ranks (torch.distributed: gloo, NCCL with a GPU per rank) the model one "
                           "process trains: rank 0 extracts once and streams the same global batches of --batch-size "
                           "rows (divisible by N), rank r training rows [r*B/N, (r+1)*B/N) of each. Takes "
                           "--checkpoint-every, --summary-json and --resume: a run of ranks resumes at the row it "
                           "reached on any N, 1 included (--resume on such a work dir uses the N given)")
    _add_demo_placement(demo)
    demo.set_defaults(func=_demo)


def _add_demo_placement(demo: argparse.ArgumentParser) -> None:
    """``demo``'s options of where its rows and ranks live, what it keeps and what it reads."""
    demo.add_argument("--tiers", choices=("auto", "ram", "tiered"), default="auto",
                      help="where the embedding rows live: one RAM tier where every table fits in memory (auto, the "
                           "default), one RAM tier always (ram), or the device cache / host RAM / SSD tiers (tiered)")
    demo.add_argument("--dist-backend", choices=("auto", "gloo", "nccl"), default="auto",
                      help="with --nproc: the ranks' process group (auto: NCCL when they train on CUDA, rank r on "
                           "GPU r, at most one rank per GPU; gloo on the CPU). gloo on GPUs lets ranks share them")
    demo.add_argument("--nan", choices=("error", "zero"), default="error",
                      help="NaN / inf / null in a dense feature: stop naming the column (error), or train on 0 "
                           "in its place, counted in the summary (zero)")
    demo.add_argument("--export", type=Path, default=None, metavar="DIR",
                      help="also export the trained model for `fbrapids serve` to DIR (a new or empty directory)")
    demo.add_argument("--memory-limit", type=_memory_limit, default=None, metavar="SIZE",
                      help="the run's memory budget, its whole process tree: bytes, a size (8GB, 6GiB) or a share of "
                           "this machine's memory (40%%); default half the machine's. A run that cannot fit is refused "
                           "before any work; one whose dictionaries do not fit beside the rest runs on a local dask "
                           "cluster whose worker spills to disk; near the budget the run says so, past it it stops")
    demo.add_argument("--summary-json", type=Path, default=None, metavar="FILE",
                      help="also write the summary (rows per stage, metrics, store, the data's CTR and oracle AUC) "
                           "as JSON to FILE")
    demo.add_argument("--workload", type=Path, default=None, metavar="FILE",
                      help="run on your own log, declared in a TOML workload file (examples/taobao.toml) instead of "
                           "the generated data")
    demo.add_argument("--data-root", type=Path, default=None, metavar="DIR",
                      help="with --workload: the folder its view paths are under (default: the file's root field)")


def _add_trial(sub: argparse._SubParsersAction) -> None:
    """Add the ``trial`` subcommand to ``sub``: a candidate feature's trial on a workload."""
    tri = sub.add_parser(
        "trial", help="does a candidate feature help? baseline vs baseline + candidates over seeds, on a workload "
                      "or the default data",
        description="Train the workload's baseline and baseline + the candidate features over K seeds, side by side "
                    "from one extraction pass, and compare them on the held-out rows (AUC / GAUC deltas with "
                    "intervals). Prints the trial's table and writes its JSON.")
    tri.add_argument("--workload", type=Path, default=None, metavar="FILE",
                     help="a TOML workload file (default: the demo's generated data, --rows, drawn with --seed)")
    tri.add_argument("--rows", type=_int_in(MIN_ROWS), default=200_000,
                     help="impressions in the default data (without --workload)")
    tri.add_argument("--data-root", type=Path, default=None, metavar="DIR",
                     help="the folder the workload's view paths are under (default: the file's root field)")
    tri.add_argument("--candidate", action="append", required=True, metavar="NAME=EXPR",
                     help="a candidate feature, e.g. 'pid_x_cate=ops.cross(\"pid\", \"cate_id\")'; repeatable")
    tri.add_argument("--kind", choices=("sparse", "dense"), default="sparse", help="what the candidates are")
    tri.add_argument("--model", default="dlrm", type=MODELS.argument("dlrm"), metavar="MODEL",
                     help="a registered model's short name")
    tri.add_argument("--seeds", type=_int_in(1, 64), default=None,
                     help="seeds per arm (K; default 3, or with --min-effect the most seeds, default 6)")
    tri.add_argument("--each", action="store_true",
                     help="try each candidate on its own against one shared baseline: a ranked table, the verdicts "
                          "corrected for the family (--correction)")
    tri.add_argument("--correction", choices=("holm", "bh"), default="holm",
                     help="with --each: Holm (family-wise error rate, the default) or Benjamini-Hochberg (false "
                          "discovery rate)")
    tri.add_argument("--min-effect", type=_float_above(0), default=None, metavar="M",
                     help="a sequential trial: start with 2 seeds, add one while an AUC interval straddles M (the "
                          "smallest gain worth having), up to --seeds")
    tri.add_argument("--no-aa", action="store_true", help="leave out the A/A arms (the candidates shuffled)")
    tri.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                     help="keep each finished seed's predictions here (and the stores' SSD tiers), so that --resume "
                          "continues a killed trial")
    tri.add_argument("--resume", action="store_true", help="continue the trial in --work-dir from its finished seeds")
    tri.add_argument("--models-per-pass", type=_int_in(1), default=None, metavar="N",
                     help="the most models trained side by side in one pass over the data (default 24): seeds are "
                          "grouped into passes of at most N models")
    tri.add_argument("--reference", action="store_true",
                     help="also time one plain training of the baseline on the same data, for the cost line")
    tri.add_argument("--n-boot", type=_int_in(1), default=200, help="paired bootstrap rounds over groups")
    tri.add_argument("--seed", type=_int_in(0, SEED_MAX), default=0)
    tri.add_argument("--level", type=float, default=0.95, help="the interval's coverage")
    tri.add_argument("--epochs", type=_int_in(1), default=1)
    tri.add_argument("--batch-size", type=_int_in(1), default=2048)
    tri.add_argument("--embedding-dim", type=_int_in(1), default=16)
    tri.add_argument("--backend", choices=("auto", "cpu", "gpu"), default=None)
    tri.add_argument("--json", type=Path, default=None, metavar="FILE",
                     help="where the trial's JSON goes (default: <workload name>-trial.json here); an existing file "
                          "is refused before the trial, unless --force")
    tri.add_argument("--force", action="store_true", help="overwrite the --json file if it exists")
    tri.add_argument("--no-progress", action="store_true", help="no progress bars")
    tri.set_defaults(func=_trial)


def _add_export(sub: argparse._SubParsersAction) -> None:
    """Add the ``export`` subcommand to ``sub``: a demo checkpoint exported for serving."""
    exp = sub.add_parser("export", help="export a demo's (or a workload run's) checkpoint for `fbrapids serve`")
    exp.add_argument("checkpoint", type=Path, help="a checkpoint directory, or a root with a `latest` pointer")
    exp.add_argument("out", type=Path, help="the export directory (new or empty)")
    exp.add_argument("--model", default="dlrm", type=ModelNames("exportable").argument("dlrm"), metavar="MODEL",
                     help="the model the checkpoint holds (a registered, exportable model)")
    exp.add_argument("--workload", type=Path, default=None, metavar="FILE",
                     help="the TOML workload file the run trained on (`demo --workload FILE --work-dir W`): the "
                          "export's spec comes from it (request columns from the log, item columns from its "
                          "item_view); default: the demo's generated data")
    exp.add_argument("--data-root", type=Path, default=None, metavar="DIR",
                     help="with --workload: the folder its view paths are under (default: the file's root field)")
    exp.add_argument("--embedding-dim", type=_int_in(1), default=16)
    exp.add_argument("--seed", type=_int_in(0, SEED_MAX), default=0)
    exp.add_argument("--signing-key-file", type=Path, default=None, metavar="FILE",
                     help="sign the export with the HMAC key in FILE (default: $FBRAPIDS_SIGNING_KEY if set)")
    exp.set_defaults(func=_export)


def _add_cache(sub: argparse._SubParsersAction) -> None:
    """Add the ``cache`` subcommand to ``sub``: the demo's generated data sets."""
    cache = sub.add_parser(
        "cache", help="list (or --clear) the demo's generated data sets in ~/.cache/fbrapids/data",
        description="The demo keeps the data it generates, one data set per --rows / --seed, in $FBRAPIDS_DATA "
                    "(default ~/.cache/fbrapids/data); the least recently used are removed once they hold more than "
                    "$FBRAPIDS_DATA_CACHE_BYTES (default 2 GiB). Without options: list them with their sizes.")
    cache.add_argument("--clear", action="store_true", help="remove every data set no running demo holds")
    cache.set_defaults(func=_cache)


def _add_serve(sub: argparse._SubParsersAction) -> None:
    """Add the ``serve`` subcommand to ``sub``: an export served over HTTP."""
    srv = sub.add_parser("serve", help="serve an exported model over HTTP (needs the 'serve' extra)")
    srv.add_argument("export_dir", type=Path, help="a directory written by `fbrapids export` or export_model")
    srv.add_argument("--host", default="127.0.0.1",
                     help="bind address; a non-loopback one needs a token (--token-file or $FBRAPIDS_SERVE_TOKEN) "
                          "or --insecure")
    srv.add_argument("--port", type=_int_in(0, 65535), default=8000)
    srv.add_argument("--token-file", type=Path, default=None, metavar="FILE",
                     help="require `Authorization: Bearer TOKEN` on every path: FILE holds one TOKEN (its first "
                          "line), or one `NAME TOKEN` per line, a token per client, each client then given its own "
                          "fair share (>= 16 characters; default: $FBRAPIDS_SERVE_TOKEN if set)")
    srv.add_argument("--token", default=None, help="the token itself (discouraged: visible in ps; prefer --token-file)")
    srv.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                     help="a Host header name clients use, besides the loopback names and the bind address "
                          "(repeatable; '*' allows any)")
    srv.add_argument("--signing-key-file", type=Path, default=None, metavar="FILE",
                     help="serve only an export signed with the HMAC key in FILE (default: $FBRAPIDS_SIGNING_KEY)")
    srv.add_argument("--insecure", action="store_true", help="allow a non-loopback host without a token")
    srv.add_argument("--cache-items", type=_int_in(0), default=100_000, help="item-feature cache entries (0: off)")
    srv.add_argument("--cache-bytes", type=_int_in(1), default=256 << 20, help="item-feature cache bytes")
    srv.add_argument("--max-items", type=_int_in(1), default=10_000, help="most candidate items in one call")
    srv.add_argument("--chunk-items", type=_int_in(1), default=512,
                     help="items scored per slice; other calls are served between slices")
    srv.add_argument("--max-requests", type=_int_in(1), default=1024, help="most requests in one /score_batch")
    srv.add_argument("--max-body-bytes", type=_int_in(1), default=4 << 20,
                     help="largest request body, refused (413) before parsing")
    srv.add_argument("--header-timeout", type=_float_above(0), default=10.0, metavar="S",
                     help="close a connection that sends no complete request head within S seconds")
    srv.add_argument("--body-timeout", type=_float_above(0), default=10.0, metavar="S",
                     help="answer 408 to a request whose body is not received within S seconds")
    srv.add_argument("--max-connections", type=_int_in(2), default=512,
                     help="open connections at once; past it, or past its unauthenticated share, a new one closes "
                          "the oldest idle one")
    srv.set_defaults(func=_serve)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fbrapids`` console script."""
    args = build_parser().parse_args(argv)
    try:
        check_arguments(args)
    except UsageError as exc:
        sys.stderr.write(_usage_line(f"fbrapids {args.command}", str(exc)))
        return 2
    except FbrapidsError as exc:  # what the machine or the folders refuse, before any heavy import
        sys.stderr.write(f"fbrapids {args.command}: {exc}\n")
        return 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.command in ("demo", "trial"):
        _print_reports()
    from fbrapids.runs.workdir import Terminated, exit_on_termination, stop_behind

    try:
        with exit_on_termination():  # SIGTERM / SIGHUP unwind (temporary folders removed, ranks stopped)
            return args.func(args)
    except BaseException as exc:  # one line, never a traceback (-v logs it)
        stop = stop_behind(exc)
        if stop is not None and stop is not exc:  # a stop that arrived wrapped: what wrapped it, for -v
            logging.getLogger("fbrapids.app.cli").info("the stop arrived as", exc_info=exc)
        if isinstance(stop, KeyboardInterrupt):
            sys.stderr.write("interrupted\n")
            return 130
        if isinstance(stop, Terminated):  # one line, exit status 128 + the signal
            sys.stderr.write(f"fbrapids {args.command}: stopped by {stop.signal_name}\n")
            return int(stop.code or 1)
        if isinstance(exc, SystemExit):
            raise
        logging.getLogger("fbrapids.app.cli").info("the failure's traceback", exc_info=True)
        line, status = failure_line(exc, args)
        sys.stderr.write(f"fbrapids {args.command}: {line}\n")
        return status


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Messages alone, to whatever ``sys.stderr`` is when each is written."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


def _print_reports() -> None:
    """What a run reports before training (the split it checked: each side's rows and times,
    the log's files in order, the time column's form) printed on stderr, once."""
    report = logging.getLogger("fbrapids.workloads.split_check.report")
    if not any(isinstance(h, _StderrHandler) for h in report.handlers):
        report.addHandler(_StderrHandler())
    report.setLevel(logging.INFO)
    report.propagate = False


#: errno values of a full disk or a file over the size limit
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def failure_line(exc: BaseException, args: argparse.Namespace) -> tuple[str, int]:
    """The one line ``fbrapids`` prints for a failure, and the exit status: 2 for what the
    input, the configuration or the machine caused (a refused configuration, a missing,
    unreadable or corrupt file, a full or read-only disk), 1 for anything else (a bug: the
    line names the exception; ``-v`` logs the traceback).  A full disk also says what could
    be freed, with sizes.

    Example:
        >>> ns = build_parser().parse_args(["gen", "--out", "x"])
        >>> failure_line(PermissionError(13, "Permission denied", "/data/a.parquet"), ns)
        ('/data/a.parquet: Permission denied', 2)
    """
    code = getattr(exc, "errno", None) or getattr(exc.__cause__, "errno", None)
    if isinstance(exc, FbrapidsError):
        line = str(exc).replace("stream with nan='zero'", "pass --nan zero to train on 0 in their place (counted)")
    elif isinstance(exc, OSError):
        line = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc) or type(exc).__name__
        if code == errno.EROFS:
            line += " (a read-only file system: choose a writable --work-dir / --data-dir)"
    else:
        return f"unexpected {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} (run with -v for " \
               "the traceback)", 1
    if code in _NO_SPACE or "free" in line and type(exc).__name__ == "PreflightError":
        from fbrapids.runs.disk_budget import freeable

        line += "; " + freeable(getattr(args, "work_dir", None))
    # a rank of the run ended by SIGTERM / SIGHUP: the run's exit status is the launcher's own would be
    return " ".join(line.split("\n")), int(getattr(exc, "exit_status", None) or 2)


if __name__ == "__main__":
    raise SystemExit(main())
