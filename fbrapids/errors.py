"""Every error fbrapids raises on purpose derives from :class:`FbrapidsError`.

Each class also derives from the standard exception a caller would expect
(``ValueError`` for bad input, ``TypeError`` for a wrong dtype, ``RuntimeError`` for a
failure of the machine or a library), so ``except ValueError`` keeps working, and
``except FbrapidsError`` catches everything the library raised deliberately.

This module sits at the bottom of the package: it imports nothing from fbrapids.

    >>> from fbrapids.errors import FbrapidsError, ViewError
    >>> issubclass(ViewError, FbrapidsError) and issubclass(ViewError, ValueError)
    True
    >>> try:
    ...     raise ViewError("no file matches 'data/*.parquet'")
    ... except FbrapidsError as exc:
    ...     print(type(exc).__name__, exc)
    ViewError no file matches 'data/*.parquet'
"""

from __future__ import annotations


class FbrapidsError(Exception):
    """The base class of every error fbrapids raises on purpose."""


# -- arguments ----------------------------------------------------------------------------
class ArgumentError(FbrapidsError, ValueError):
    """An argument outside the values a function accepts (the message names the argument,
    the value given and what is accepted)."""


class InputTypeError(FbrapidsError, TypeError):
    """An argument or input array of a type a function does not accept (names it and its type)."""


class NotFoundError(FbrapidsError, KeyError):
    """A name looked up that is not there (a column of a batch or frame, a feature, a
    state-dict key); the message names it and what there is.

        >>> str(NotFoundError("column 'x' is not in the batch"))
        "column 'x' is not in the batch"
    """

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UsageError(FbrapidsError, ValueError):
    """A command-line mistake found after argparse's own checks (a path that is a file, an
    environment variable); ``fbrapids`` prints it as one line and exits with status 2."""


class MissingFileError(FbrapidsError, FileNotFoundError):
    """A file fbrapids needs is not there (a view file that vanished, a store's files, a
    kernel header); the message names the path."""


# -- backends and machines -------------------------------------------------------------
class BackendUnavailableError(FbrapidsError, RuntimeError):
    """The GPU backend was asked for, but what it needs is missing."""


class BackendNameError(FbrapidsError, ValueError):
    """A backend name that is none of ``cpu``, ``gpu``, ``auto`` (from an argument or
    ``$FBRAPIDS_BACKEND``; the message says which)."""


# -- views, cleaning, joins --------------------------------------------------------------
class ViewError(FbrapidsError, ValueError):
    """A view could not be read as asked; the message names the file, column or pattern."""


class InputChangedError(ViewError):
    """An input file that changed (replaced, rewritten, truncated) after the run planned it,
    or whose rows contradict what its footer said; the message names the file."""


class CleanError(FbrapidsError, ValueError):
    """A clean spec names a column that is not there, or a filter that is not boolean."""


class JoinError(FbrapidsError, ValueError):
    """A join that would give a wrong or silently empty answer."""


# -- operators, plans, kernels -------------------------------------------------------------
class FeatureError(FbrapidsError, ValueError):
    """A feature that cannot be planned; the message names the feature (and the column)."""


class OperatorError(FbrapidsError, ValueError):
    """Unknown operator, wrong arity, bad parameter."""


class OperatorTypeError(FbrapidsError, TypeError):
    """An operator input of a type the operator does not accept."""


class ColumnTypeError(FbrapidsError, TypeError):
    """A frame column the kernels cannot read (names the column and its dtype)."""


class CompilerNotFoundError(FbrapidsError, RuntimeError):
    """No C compiler on this machine."""


class KernelCompileError(FbrapidsError, RuntimeError):
    """The C compiler rejected a generated kernel (the message quotes it and the source)."""

    def __init__(self, message: str, log: str, source: str):
        super().__init__(message)
        self.log, self.source = log, source


class KernelCacheError(FbrapidsError, RuntimeError):
    """A kernel library built into the cache cannot be loaded, even rebuilt (names the file)."""


class KernelRuntimeError(FbrapidsError, RuntimeError):
    """A kernel reported an error the data caused (e.g. a value a cast cannot hold)."""


class NvrtcUnavailableError(FbrapidsError, RuntimeError):
    """libnvrtc could not be found or loaded."""


class NvrtcCompileError(FbrapidsError, RuntimeError):
    """NVRTC rejected the source.  ``log`` holds NVRTC's log; the message also quotes the
    offending source lines with their numbers."""

    def __init__(self, message: str, log_text: str, name: str):
        super().__init__(message)
        self.log = log_text
        self.name = name


# -- training and the embedding store --------------------------------------------------------
class StoreError(FbrapidsError, RuntimeError):
    """The embedding store cannot do what was asked (capacity, a lookup applied out of order)."""


class StoreMemoryError(StoreError, MemoryError):
    """The embedding store's C helpers could not allocate the memory a step needs (a hash
    map growing, a batch's scratch table); the message names the table structure and the size."""


class TierFileError(StoreError):
    """A file of the embedding store's SSD tier cannot hold or give back its rows: a full
    disk, a file over the size limit, or a file truncated by something else.  The message
    names the path; ``path`` and ``errno`` (when the system gave one) are attributes."""

    def __init__(self, message: str, path: str, errno: int | None = None):
        super().__init__(message)
        self.path, self.errno = path, errno


class SsdDirLockedError(TierFileError):
    """Another process holds an SSD table folder (two stores sharing it would overwrite each
    other's rows); names the folder (``path``) and the holder's PID (``pid``)."""

    def __init__(self, message: str, path: str, pid: int | None = None):
        super().__init__(message, path)
        self.pid = pid


class RowIndexError(FbrapidsError, IndexError):
    """An index outside an embedding table's rows, refused before the C code reads memory."""


class ClusterError(FbrapidsError, RuntimeError):
    """A dask cluster cannot run the work (no workers, an address that is no dask scheduler)."""


class TrialError(FbrapidsError, RuntimeError):
    """A feature trial whose two arms are not comparable."""


class BatchError(FbrapidsError, ValueError):
    """A frame that cannot become training batches: null ids, NaN dense values or labels
    (names the feature, the partition and the first row)."""


class DataGenError(FbrapidsError, ValueError):
    """The data generator was asked for something it cannot make."""


# -- exports, checkpoints and serving ----------------------------------------------------------
class UnsafeFileError(FbrapidsError, ValueError):
    """An export or checkpoint that loading refuses: a path that leaves it, a file that would
    run code (a pickle), a model class outside the registry, a format this version cannot read."""


class ManifestError(FbrapidsError, ValueError):
    """A directory does not match its digest manifest (a file missing, changed or unlisted)."""


class RequestError(FbrapidsError, ValueError):
    """A scoring request a client got wrong; the message names the request, item and column."""

    #: which request of a batch call the error blamed (its index), set by the scorer; None: not known
    entry: int | None = None


class RequestTooLargeError(RequestError):
    """A scoring request over a configured bound (body bytes, items, requests per batch)."""


class ModelInputError(RequestError):
    """A valid record the model cannot score (a dense value so large the network overflows);
    names the record and the model input."""


class CallCancelledError(FbrapidsError, RuntimeError):
    """A scoring call dropped before it was done because its client has gone (hung up):
    nothing is left to answer."""


class WorkloadError(FbrapidsError, ValueError):
    """A workload spec (:class:`~fbrapids.workloads.Workload`) or run config that does not hold
    together: names the field, and the file (a TOML spec) or column concerned."""


class ModelStreamError(FbrapidsError, ValueError):
    """A model and the stream it is fed disagree on the features (names the feature, or the
    dense width), found before training."""


class SpecError(FbrapidsError, ValueError):
    """A :class:`~fbrapids.serving.spec.ServingSpec` that does not hold together (names the
    column or feature)."""


class ExportError(FbrapidsError, ValueError):
    """A model or spec that cannot be written as an export of data (names what and why)."""


# -- state: checkpoints, work dirs, data dirs --------------------------------------------------
class CheckpointError(FbrapidsError, ValueError):
    """No checkpoint can be used as asked (none verifies, or old ones would be mixed in)."""


class CheckpointMismatchError(CheckpointError):
    """A resume (or a load) with settings other than the checkpoint's: another model,
    embedding dim, feature list or order, batch size, seed or data; names each difference."""


class NonFiniteError(FbrapidsError, FloatingPointError):
    """Training reached a NaN / inf loss, gradient or weight; names the step and the table."""


class DistributedError(FbrapidsError, RuntimeError):
    """Ranks of a distributed run disagree (configuration, SSD folders), or a rank failed; names the rank.

    ``errno``: the errno of the ``OSError`` a failed rank raised (a full disk on a rank), else
    None; ``exit_status``: 128 + the signal for a rank ended by SIGTERM / SIGHUP / SIGINT (the
    run was stopped, as a terminated launcher exits), else None."""

    def __init__(self, message: str, errno: int | None = None, exit_status: int | None = None):
        super().__init__(message)
        self.errno, self.exit_status = errno, exit_status


class WorkDirLockedError(FbrapidsError, RuntimeError):
    """Another run holds the work dir; names the holder's PID and host (also as ``pid``, ``host``)."""

    def __init__(self, message: str, pid: int | None = None, host: str | None = None):
        super().__init__(message)
        self.pid, self.host = pid, host


class PreflightError(FbrapidsError, OSError):
    """A directory training needs is not writable, or lacks the free space (sizes in the message)."""


class MemoryBudgetError(FbrapidsError, RuntimeError):
    """A run does not fit its memory budget (``--memory-limit``): refused before any work, or
    stopped when its memory passes the budget; the budget and the parts are in the message."""


class DataDirError(FbrapidsError, ValueError):
    """A data folder holds data fbrapids did not make; it is never overwritten."""


class RangeError(FbrapidsError, ValueError):
    """A dense feature outside its declared range under ``strict=True``; names the column and row."""


class ServeConfigError(FbrapidsError, ValueError):
    """A serving configuration refused at start-up (e.g. a public host without a token)."""


class LabelError(FbrapidsError, ValueError):
    """A label column a trainer cannot learn from: names the column, the partition and a bad value."""


class MetricUndefinedError(FbrapidsError, ValueError):
    """A metric asked of data that cannot define it (AUC with one class only)."""


class UndefinedMetricWarning(UserWarning):
    """Evaluation data that leaves some metrics undefined (all labels one class)."""


class FbrapidsWarning(UserWarning):
    """The base class of the warnings fbrapids gives on purpose: something that may be
    meant, but is more often a mistake (the message names the file, column or feature)."""


class SeparatorWarning(FbrapidsWarning):
    """A CSV file read with a ``sep`` that splits its header into one column, where another
    separator splits it into several (``read_view(path, sep=";")`` on a comma file)."""


class NoMatchWarning(FbrapidsWarning):
    """A ``clean(json=...)`` path found in none of the documents that parse (its output
    column is all null)."""


class ReplacedColumnWarning(FbrapidsWarning):
    """An ``extract`` feature named like one of the frame's input columns: the input
    column is replaced by the feature."""


class PlotUnavailableError(FbrapidsError, ImportError):
    """matplotlib (the ``plot`` extra) is not installed."""


# -- fitted operators ------------------------------------------------------------------------
class NotFittedError(FbrapidsError, ValueError):
    """A fitted operator (categorify, target_encode, ...) extracted with no fitted state:
    the message names the feature and says how to fit it."""


class FittedStateError(FbrapidsError, ValueError):
    """Saved fitted state that cannot be read back (a missing file or table, a bad format)."""


class NotAnExportError(FbrapidsError, FileNotFoundError):
    """A directory given as a serving export holds no ``serving.json`` (the message says what it is)."""
