"""The built-in operators, as data: :data:`BUILTINS`.  Importing this module registers
nothing; :mod:`fbrapids.kernels.registry` fills the registry from :data:`BUILTINS`.  Public
constructors are in :mod:`fbrapids.ops`.

Each built-in is one :class:`~fbrapids.kernels.operator.Operator`: its resolver gives the C
(see :mod:`fbrapids.kernels.operator` for the template placeholders), and it declares what
the rest asks about it (parameter checks, stage, family, dictionary path, hashing, time
input, distinct-value bounds): the planner, runtimes and budgets ask it, never its name.  Its C
lives in ``csrc/ops/*.h``.

Example:
    >>> sorted(op.name for op in BUILTINS if op.needs_fit)[:3]
    ['categorify', 'count_encode', 'fill_null_fitted']
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from fbrapids.errors import OperatorError
from fbrapids.kernels import params as P, types as T
from fbrapids.kernels.clit import c_number, c_string
from fbrapids.kernels.expr import Call
from fbrapids.kernels.operator import Bound, DictionaryPath, Impl, Operator, Sizes
from fbrapids.kernels.vocab import Vocabulary

H_VIEWS = "ops/fbx_views.h"
H_SCALAR = "ops/fbx_ops_scalar.h"
H_HASH = "ops/fbx_ops_hash.h"
H_STRING = "ops/fbx_ops_string.h"
H_LIST = "ops/fbx_ops_list.h"
H_CROSS = "ops/fbx_ops_cross.h"
H_LOOKUP = "ops/fbx_ops_lookup.h"
H_JSON = "ops/fbx_ops_json.h"
JSON_SCAN_PATHS = 4  #: FBX_JSON_SCAN_PATHS of csrc/ops/fbx_ops_json.h: paths one json_scan reads

#: every built-in operator, in definition order
BUILTINS: list[Operator] = []


def _sep(params: dict, name: str = "sep") -> tuple[str, int]:
    """A checked separator as (C string literal, its length in bytes)."""
    sep = params[name]
    return c_string(sep), len(sep.encode())


def _type_range(x: str) -> tuple[int, int] | tuple[float, float]:
    """The values a fixed-width type holds: ``(min, max)`` (floats: the finite range)."""
    if x == "bool":
        return 0, 1
    dt: np.dtype[Any] = np.dtype(T.NUMPY_DTYPE[x])
    if x in T.INT_TYPES:
        ints = np.iinfo(dt)
        return int(ints.min), int(ints.max)
    floats = np.finfo(dt)
    return float(floats.min), float(floats.max)


def _number(v: Any, x: str, what: str) -> int | float:
    """``v`` as an exact value of a ``x`` column, or an OperatorError naming it: an integer
    column takes integers (or integral floats) in its range, a float column any number whose
    rounding to it stays finite.  Never wrapped."""
    if isinstance(v, bool) and x != "bool" or not isinstance(v, (int, float, np.integer, np.floating, bool)):
        raise OperatorError(f"{what} must be a number for a {x} column, got {v!r}")
    lo, hi = _type_range(x)
    if x in T.INT_TYPES:
        if isinstance(v, (float, np.floating)) and not float(v).is_integer():
            raise OperatorError(f"{what} {v!r} is not an integer, and the column is {x}")
        if not lo <= int(v) <= hi:
            raise OperatorError(f"{what} {v!r} does not fit the column's type {x} [{lo}, {hi}]")
        return int(v)
    v = float(v)
    with np.errstate(over="ignore"):
        overflows = np.isfinite(v) and not np.isfinite(T.NUMPY_DTYPE[x](v))
    if overflows:
        raise OperatorError(f"{what} {v!r} does not fit the column's type {x} (overflows to infinity)")
    return v


def _op(name: str, inputs: tuple[str, ...], doc: str, null_rule: str = "a null input gives a null output",
        variadic: bool = False, headers: tuple[str, ...] = (), **declared: Any):
    """Register the decorated resolver as the built-in ``name``; ``declared``: the
    :class:`Operator`'s other properties (``family`` defaults to ``scalar``)."""
    def deco(fn):
        BUILTINS.append(Operator(name=name, inputs=inputs, resolver=fn, doc=doc, variadic=variadic,
                                 null_rule=null_rule, headers=(H_VIEWS,) + headers,
                                 **{"family": "scalar", **declared}))
        return fn
    return deco


#: the declared checks of the parameters several operators share
BUCKETS = P.integer(lo=1)  # bucket ids are int64
BUCKETS_OR_RAW = P.integer(lo=0, none=True)  # 0 / None: raw fingerprints (uint64)
COUNT = P.integer(lo=0)


# -- scalar ------------------------------------------------------------------------------
@_op("fill_null", ("any",), "The value, or `value` where it is null (lists: only [] as the fill).",
     null_rule="never null: nulls become `value`", headers=(H_STRING, H_LIST))
def _fill_null(t, p):
    (x,) = t
    v = p.get("value")
    if x in T.FIXED_TYPES:
        v = _number(v, x, "fill_null value")
        if v != v:
            raise OperatorError(f"fill_null value NaN would leave the {x} column's nulls null")
        return Impl(x, "expr", f"({{v0}} ? {{a0}} : ({T.C_TYPE[x]}){c_number(v, x)})",
                    null_rule="handles", never_null=True)
    if x == "str":
        if not isinstance(v, str):
            raise OperatorError(f"fill_null of a string column needs a string, got {v!r}")
        return Impl("str", "var", f"fbx_fill_str({{a0}}, {{v0}}, {c_string(v)}, {len(v.encode())}, {{out}})",
                    null_rule="handles")
    if v != [] and v != ():
        raise OperatorError(f"fill_null of a {x} column takes [] only, got {v!r}")
    if x == "list<str>":
        return Impl(x, "var", "({v0} ? fbx_slice_ls({a0}, {a0}.n, 0, {ends}, {bytes}, {nbytes}) : (*{nbytes} = 0, 0))",
                    null_rule="handles")
    return Impl(x, "var", "fbx_fill_li({a0}, {v0}, {out})", null_rule="handles")


@_op("log1p", ("num",), "log(1 + x) in float64.")
def _log1p(t, p):
    return Impl("f64", "expr", "FBX_LOG1P((double){a0})")


@_op("clip", ("num",), "x limited to [lower, upper], in the input's type.")
def _clip(t, p):
    (x,) = t
    lo, hi = p.get("lower"), p.get("upper")
    for nm, v in (("lower", lo), ("upper", hi)):
        if not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, bool) or v != v:
            raise OperatorError(f"clip parameter {nm!r} must be a number, got {v!r}")
    if lo > hi:
        raise OperatorError(f"clip: lower {lo} > upper {hi}")
    tmin, tmax = _type_range(x) if x in T.INT_TYPES else (-np.inf, np.inf)
    # a bound beyond the type's range on its own side changes nothing: it is the type's end;
    # one beyond it on the other side would put every value outside the type: an error
    if lo > tmax or hi < tmin:
        raise OperatorError(f"clip: bounds [{lo}, {hi}] leave no value of the column's type {x} [{tmin}, {tmax}]")
    if x in T.FLOAT_TYPES:  # a finite bound past the float type's range: its infinity
        fmin, fmax = _type_range(x)
        lo, hi = (-np.inf if lo < fmin else float(lo)), (np.inf if hi > fmax else float(hi))
    lo = tmin if lo < tmin else _number(lo, x, "clip parameter 'lower'")
    hi = tmax if hi > tmax else _number(hi, x, "clip parameter 'upper'")
    ct = T.C_TYPE[x]
    lo_c, hi_c = f"({ct}){c_number(lo, x)}", f"({ct}){c_number(hi, x)}"
    return Impl(x, "expr", f"({{a0}} < {lo_c} ? {lo_c} : ({{a0}} > {hi_c} ? {hi_c} : {{a0}}))")


#: the values of the small fixed-width types (a cast to one bounds an expression's values)
SMALL_INTS = {"i8": 1 << 8, "u8": 1 << 8, "int8": 1 << 8, "uint8": 1 << 8, "i16": 1 << 16, "u16": 1 << 16,
              "int16": 1 << 16, "uint16": 1 << 16, "bool": 2}


def _cast_bound(call: Call, sizes: Sizes) -> Bound | None:
    """A cast to a small type: that type's values; and never more than its input's."""
    to = str(call.param_dict().get("to"))
    found = [(SMALL_INTS[to], f"the {SMALL_INTS[to]:,} values of {to}")] if to in SMALL_INTS else []
    inner = sizes.values(call.args[0]) if call.args else None
    return min(found + ([inner] if inner is not None else []), key=lambda b: b[0], default=None)


@_op("cast", ("num",), "x converted to another fixed-width type: exact, or an error naming the row and the "
     "value that does not fit (never wrapped); floats to integers truncate toward zero, to bool: x != 0.",
     bound=_cast_bound)
def _cast(t, p):
    to = p.get("to")
    if to not in T.FIXED_TYPES:
        raise OperatorError(f"cast: 'to' must be one of {', '.join(T.FIXED_TYPES)}, got {to!r}")
    if to == "bool":
        return Impl(to, "expr", "(fbx_u8)({a0} != 0)")
    return Impl(to, "expr", f"({T.C_TYPE[to]}){{a0}}", checks_fit=to)


def _bucketize_bound(call: Call, sizes: Sizes) -> Bound | None:
    n = len(call.param_dict().get("boundaries") or ())
    return (n + 1, f"{n} boundaries + 1") if "boundaries" in call.param_dict() else None


@_op("bucketize", ("num",), "TensorFlow Bucketize: the number of boundaries b with b <= x (int32).",
     headers=(H_SCALAR,), bound=_bucketize_bound)
def _bucketize(t, p):
    (x,) = t
    b = list(p.get("boundaries") or ())
    if not b or any(not _is_number(v) or v != v for v in b) or any(u > v for u, v in zip(b, b[1:])):
        raise OperatorError(f"bucketize: boundaries must be a non-empty sorted list of numbers, got {p.get('boundaries')!r}")
    if x in T.FLOAT_TYPES:  # b <= x  <=>  d <= x for the smallest double d >= b (exact for any b)
        d = np.array([_double_at_least(v) for v in b], dtype=np.float64)
        return Impl("i32", "expr", f"fbx_bucketize((double){{a0}}, (const double*){{b0}}, {len(d)})", buffers=(d,))
    # an integer column compares exactly: b <= x  <=>  ceil(b) <= x; thresholds past the type's
    # ends count for every value (below) or none (above); the rest compare in the column's sign
    tmin, tmax = _type_range(x)
    th = [math.ceil(v) if isinstance(v, float) and math.isfinite(v) else v for v in b]
    always = sum(1 for v in th if v <= tmin)
    mid = [int(v) for v in th if tmin < v <= tmax]
    kind = "u64" if x in ("u64", "u32", "u16", "u8", "bool") else "i64"
    arr = np.array(mid or [0], dtype=np.uint64 if kind == "u64" else np.int64)
    return Impl("i32", "expr", f"fbx_bucketize_{kind}((fbx_{kind}){{a0}}, (const fbx_{kind}*){{b0}}, {len(mid)}, "
                f"{always})", buffers=(arr,))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _double_at_least(v: int | float) -> float:
    """The smallest double ``d >= v`` (``inf`` past the largest): for a double ``x``,
    ``v <= x`` exactly when ``d <= x``."""
    if isinstance(v, (float, np.floating)):
        return float(v)
    try:
        d = float(v)
    except OverflowError:
        return math.inf if v > 0 else -sys.float_info.max
    return d if d >= v else math.nextafter(d, math.inf)


_TIME_OF = ("datetime64 (any unit; time-zoned in UTC, naive taken as UTC) or integer epoch seconds (the "
            "whole int64 / uint64 range)")
for _name, _fn, _part, _doc in (("hour", "fbx_hour", "sod", "Hour of day (UTC, 0-23) (int32)"),
                                ("weekday", "fbx_weekday", "days", "Day of week (UTC, Monday = 0) (int32)"),
                                ("day", "fbx_day", "days", "Day of month (UTC, 1-31) (int32)")):
    def _time(t, p, _fn=_fn, _part=_part):
        sign = "u64" if t[0] == "u64" else "i64"  # a uint64 second above 2^63 is not a negative time
        return Impl("i32", "expr", f"{_fn}(fbx_{_part}_{sign}((fbx_{sign}){{a0}}))")
    _op(_name, ("int",), f"{_doc} of {_TIME_OF}.", headers=(H_SCALAR,), reads_time=True)(_time)


# -- hashing -----------------------------------------------------------------------------
def _hash_impl(x: str, buckets: int) -> Impl:
    out_scalar, out_list = ("i64", "list<i64>") if buckets > 0 else ("u64", "list<u64>")
    if x == "str":
        return Impl(out_scalar, "expr", f"fbx_hb_str({{a0}}, {buckets}LL)")
    if x in T.INT_TYPES:
        fn = "fbx_hb_i64((fbx_i64)" if T.is_signed(x) else "fbx_hb_u64((fbx_u64)"
        return Impl(out_scalar, "expr", f"{fn}{{a0}}, {buckets}LL)")
    fn = {"list<str>": "fbx_hb_list_str", "list<i64>": "fbx_hb_list_i64", "list<u64>": "fbx_hb_list_u64"}[x]
    return Impl(out_list, "var", f"{fn}({{a0}}, {buckets}LL, {{out}})")


@_op("hash", ("crossable",), "FarmHash Fingerprint64 (uint64) of a string, of an integer's decimal text, "
     "or of each element of a list.", headers=(H_HASH,), family="hash", hashes=True,
     dictionary=DictionaryPath(device=True))
def _hash(t, p):
    return _hash_impl(t[0], 0)


@_op("hash_bucket", ("crossable",), "TensorFlow to_hash_bucket_fast: fingerprint64(str(x)) mod buckets (int64); "
     "element-wise on lists.", headers=(H_HASH,), family="hash", hashes=True,
     dictionary=DictionaryPath(device=True), params={"buckets": BUCKETS})
def _hash_bucket(t, p):
    return _hash_impl(t[0], int(p["buckets"]))


_XIN = {"str": "fbx_x_str", "list<i64>": "fbx_x_li64", "list<u64>": "fbx_x_lu64", "list<str>": "fbx_x_lstr"}


@_op("cross", ("crossable",), "Hashed cross of N inputs: hb(str(x1) + sep + ... + str(xk)); with a list "
     "input, the cartesian product (first input outermost), at most `cap` pairs.", variadic=True,
     headers=(H_HASH, H_CROSS), null_rule="a null input gives a null output; an empty list gives []",
     family="cross", hashes=True, dictionary=DictionaryPath(),
     params={"buckets": BUCKETS_OR_RAW, "cap": BUCKETS_OR_RAW, "sep": P.separator})
def _cross(t, p):
    if len(t) > 16:
        raise OperatorError(f"cross takes at most 16 inputs, got {len(t)}")
    buckets = int(p.get("buckets") or 0)
    cap = int(p.get("cap") or 0)
    sep, seplen = _sep(p)
    lines = [f"fbx_xin xs_{{id}}[{len(t)}];"]
    for i, x in enumerate(t):
        if x in _XIN:
            lines.append(f"xs_{{id}}[{i}] = {_XIN[x]}({{a{i}}});")
        elif T.is_signed(x):
            lines.append(f"xs_{{id}}[{i}] = fbx_x_i64((fbx_i64){{a{i}}});")
        else:
            lines.append(f"xs_{{id}}[{i}] = fbx_x_u64((fbx_u64){{a{i}}});")
    call = f"fbx_cross(xs_{{id}}, {len(t)}, {sep}, {seplen}, {buckets}LL, {{cap}}LL, {{err}}, {{out}})"
    if any(x in T.LIST_TYPES for x in t):
        return Impl("list<i64>" if buckets else "list<u64>", "var", call.replace("{cap}", str(cap)),
                    prelude=" ".join(lines))
    return Impl("i64" if buckets else "u64", "func", f"({call.replace('{cap}', '1')}, 1)", prelude=" ".join(lines))


# -- strings -----------------------------------------------------------------------------
@_op("split", ("str",), "Split on every occurrence of `sep`, empty pieces removed: list<str>; or with "
     "`buckets` their hash buckets (list<int64>), buckets=0 their raw fingerprints (list<uint64>).",
     headers=(H_HASH, H_STRING), family="string", hashes=True,
     dictionary=DictionaryPath(kind="tokens", takes=("str",)), params={"sep": P.separator, "buckets": BUCKETS_OR_RAW})
def _split(t, p):
    sep, seplen = _sep(p)
    b = p.get("buckets")
    if b is None:
        return Impl("list<str>", "var", f"fbx_split_str({{a0}}, {sep}, {seplen}, {{ends}}, {{bytes}}, {{nbytes}})")
    b = int(b)
    return Impl("list<i64>" if b else "list<u64>", "var", f"fbx_split_hash({{a0}}, {sep}, {seplen}, {b}LL, {{out}})")


@_op("length", ("strorlist",), "Bytes of a string, elements of a list (int32).", family="string")
def _length(t, p):
    if t[0] in T.FIXED_TYPES:
        raise OperatorError(f"length takes a string or a list, got {t[0]}")
    return Impl("i32", "expr", "(fbx_i32)({a0}.n)")


@_op("lower", ("str",), "ASCII lower case (other bytes, UTF-8 included, unchanged).", headers=(H_STRING,),
     family="string")
def _lower(t, p):
    return Impl("str", "var", "fbx_lower({a0}, {out})")


@_op("substring", ("str",), "Code points [start, start + length) of UTF-8 text (Python slicing; a negative "
     "start counts from the end; length None means to the end).", headers=(H_STRING,), family="string",
     params={"start": P.integer(), "length": P.integer(lo=0, none=True)})
def _substring(t, p):
    start = int(p["start"])
    length = None if p.get("length") is None else int(p["length"])
    return Impl("str", "var", f"fbx_substring({{a0}}, {start}LL, {-1 if length is None else length}LL, {{out}})")


# -- lists -------------------------------------------------------------------------------
@_op("ngrams", ("list<str>",), "The n-grams of a token list joined by `sep` (list<str>), or with `buckets` "
     "their hash buckets.", headers=(H_HASH, H_LIST), family="list", hashes=True,
     dictionary=DictionaryPath(kind="tokens", takes=("list<str>",), coded_inputs_only=True),
     params={"n": P.integer(lo=1), "sep": P.separator, "buckets": BUCKETS_OR_RAW})
def _ngrams(t, p):
    n = int(p["n"])
    sep, seplen = _sep(p)
    b = p.get("buckets")
    if b is None:
        return Impl("list<str>", "var", f"fbx_ngrams_str({{a0}}, {n}LL, {sep}, {seplen}, {{ends}}, {{bytes}}, {{nbytes}})")
    b = int(b)
    return Impl("list<i64>" if b else "list<u64>", "var",
                f"fbx_ngrams_hash({{a0}}, {n}LL, {sep}, {seplen}, {b}LL, {{err}}, {{out}})")


def _k_elements(call: Call) -> int | None:
    """The most elements a ``first_k`` / ``last_k`` list holds: ``k``."""
    k = call.param_dict().get("k")
    return k if isinstance(k, int) and k >= 0 else None


for _name, _end in (("first_k", 0), ("last_k", 1)):
    def _slice(t, p, _end=_end):
        k = int(p["k"])
        if t[0] == "list<str>":
            return Impl("list<str>", "var", f"fbx_slice_ls({{a0}}, {k}LL, {_end}, {{ends}}, {{bytes}}, {{nbytes}})")
        return Impl(t[0], "var", f"fbx_slice_li({{a0}}, {k}LL, {_end}, {{out}})")
    _op(_name, ("list",), f"The {'last' if _end else 'first'} k elements of a list (behaviour sequences).",
        headers=(H_LIST,), family="list", params={"k": COUNT}, longest=_k_elements)(_slice)


# -- dictionaries ------------------------------------------------------------------------
@_op("lookup", ("hashable",), "Dictionary value -> id (int64), `oov` for values not in it.",
     null_rule="a null input gives the out-of-vocabulary id", headers=(H_LOOKUP,), family="lookup",
     dictionary=DictionaryPath(), params={"oov": P.integer()})
def _lookup(t, p):
    vocab = p.get("vocab")
    if not isinstance(vocab, Vocabulary):
        raise OperatorError(f"lookup needs a fitted Vocabulary, got {type(vocab).__name__}")
    oov = int(p["oov"])
    x = t[0]
    oov_c = c_number(oov, "i64")
    if not len(vocab):  # an empty vocabulary: every row (of any column) is out of it
        return Impl("i64", "expr", oov_c, null_rule="handles", never_null=True)
    if (x == "str") != (vocab.kind == "str"):
        raise OperatorError(f"lookup: a {x} column against a vocabulary of {vocab.kind} keys")
    bufs = vocab.table(unsigned=x == "u64")
    if vocab.kind == "str":
        call = f"fbx_lookup_str({{a0}}, (const fbx_i64*){{b0}}, (const fbx_i64*){{b1}}, (const char*){{b2}}, (const fbx_i64*){{b3}}, {vocab.mask}LL, {oov_c})"
    else:
        call = f"fbx_lookup_int((fbx_i64){{a0}}, (const fbx_i64*){{b0}}, (const fbx_i64*){{b1}}, (const fbx_i64*){{b2}}, {vocab.mask}LL, {oov_c})"
    return Impl("i64", "expr", f"({{v0}} ? {call} : {oov_c})", null_rule="handles", never_null=True, buffers=bufs,
                footprint=int(sum(b.nbytes for b in bufs)))


# -- frame-level operators ---------------------------------------------------------------
# Computed over whole frames by :mod:`fbrapids.features.fitted` (their ``stage``: ``fitted``,
# statistics fitted on a training frame and frozen; ``history``, over a key's earlier rows;
# ``row``, vectorised per partition), never planned into a meta-kernel: their calls are
# replaced by columns first.
def _frame_level(name: str):
    def resolver(t, p):
        raise OperatorError(f"{name} runs at frame level (fbrapids.features.fitted), not in a meta-kernel: "
                            "extract it with frame.fbx.extract (fitted operators: fit first, frame.fbx.fit)")
    return resolver


def _frame_op(name: str, stage: str, doc: str, **declared: Any) -> None:
    BUILTINS.append(Operator(name=name, inputs=("any",), resolver=_frame_level(name), doc=doc, variadic=True,
                             null_rule="see fbrapids.ops", headers=(H_VIEWS,), stage=stage,
                             **{"family": "scalar", **declared}))


#: the longest list ``pad`` makes (list offsets are int32)
PAD_MAX = 2**31 - 1


def _overlap_bound(call: Call, sizes: Sizes) -> Bound | None:
    """0 .. the shorter list's most elements, or null."""
    longest = [n for n in map(sizes.length, call.args) if n is not None]
    if len(call.args) != 2 or not longest:
        return None
    return min(longest) + 2, f"0 to {min(longest)} elements in common, or null"


def _history_bound(call: Call, sizes: Sizes) -> Bound | None:
    """The values of its second argument."""
    return sizes.values(call.args[1] if len(call.args) > 1 else call.args[0]) if call.args else None


_frame_op("categorify", "fitted", "Fitted vocabulary: ids 0 padding, 1 null, 2.. out of vocabulary (hashed into "
          "`oov_buckets`), then the values seen >= `min_freq` times (at most `max_size`) by count.", family="lookup")
_frame_op("count_encode", "fitted", "Rows per key tuple in the fitted frame (0 for unseen).")
_frame_op("target_encode", "fitted", "Smoothed mean label per key tuple; out of fold on the fitted frame.")
_frame_op("quantile_bucketize", "fitted", "Fitted quantile buckets; null -> bucket 0.")
_frame_op("normalize", "fitted", "(x - fitted mean) / fitted std.")
_frame_op("minmax", "fitted", "(x - fitted min) / (fitted max - min).")
_frame_op("fill_null_fitted", "fitted", "Nulls replaced by the fitted mean or median.")
_frame_op("history", "history", "The key's last N items strictly before the row's time.", bound=_history_bound)
_frame_op("window_count", "history", "The key's events in [t - window, t).")
_frame_op("window_mean", "history", "Mean of a value over the key's events in [t - window, t).")
_frame_op("time_since", "history", "Time since the key's previous event.")
_frame_op("lookup_value", "row", "Dictionary value -> float64.")
_frame_op("pad", "row", "A list padded / cut to exactly n elements.", params={"n": P.integer(lo=0, hi=PAD_MAX)})
_frame_op("overlap_count", "row", "Elements of one list found in another.", bound=_overlap_bound)


# -- JSON --------------------------------------------------------------------------------
@_op("json_get", ("str",), "The string at a dotted `path` of a strict JSON document (WORKLOAD.md section 3).",
     null_rule="null when the input is null, malformed, lacks the path, or holds a non-string there",
     headers=(H_JSON,), family="json")
def _json_get(t, p):
    path = _json_path(p, "json_get")
    return Impl("str", "var", f"fbx_json_get({{a0}}, {path}, {{status}}, {{out}}, {{scratch}})",
                status=bool(p.get("with_status", False)))


def _json_path(p: dict, op: str) -> str:
    """The C arguments ``path, path_len, segments`` of a json operator's ``path`` parameter."""
    path = p.get("path")
    if not isinstance(path, str) or not path:
        raise OperatorError(f"{op}: path must be a non-empty dotted string, got {path!r}")
    return f"{c_string(path)}, {len(path.encode())}, {path.count('.') + 1}"


@_op("json_scan", ("str",), "One strict-JSON walk for 1 to 4 dotted `paths` at once: their codes packed in an "
     "int64, 64 / len(paths) bits each, (offset of the string value << 3) | status (0 found, 1 malformed, 2 missing, "
     "3 not a string, 4 too deep, 7 offset too large for the code), what json_pick reads.", headers=(H_JSON,),
     family="json")
def _json_scan(t, p):
    paths = p.get("paths")
    if not isinstance(paths, tuple) or not 1 <= len(paths) <= JSON_SCAN_PATHS:
        raise OperatorError(f"json_scan: paths must be a tuple of 1 to {JSON_SCAN_PATHS} paths, got {paths!r}")
    for path in paths:
        _json_path({"path": path}, "json_scan")
    lens = ", ".join(f"{len(q.encode())}" for q in paths)
    segs = ", ".join(f"{q.count('.') + 1}" for q in paths)
    return Impl("i64", "func", f"fbx_json_scan({{a0}}, {c_string(''.join(paths))}, pl{{id}}, ps{{id}}, {len(paths)}, {{out}})",
                prelude=f"const fbx_i64 pl{{id}}[{len(paths)}] = {{{lens}}}; const fbx_i64 ps{{id}}[{len(paths)}] = {{{segs}}};")


@_op("json_pick", ("str", "int"), "The string json_scan (the second input, over the same document, of `group` "
     "paths) found for its path number `index`, which is `path` (walked again only when its offset did not fit).",
     null_rule="null when either input is null, or json_scan's status for the path is not 0", headers=(H_JSON,),
     family="json", params={"group": P.integer(lo=1), "index": COUNT})
def _json_pick(t, p):
    group, index = int(p["group"]), int(p["index"])
    if not index < group <= JSON_SCAN_PATHS:
        raise OperatorError(f"json_pick: needs 0 <= index < group <= {JSON_SCAN_PATHS}, got index {index}, group {group}")
    path = _json_path(p, "json_pick")
    return Impl("str", "var", f"fbx_json_pick({{a0}}, {{a1}}, {index}, {group}, {path}, {{status}}, {{out}}, {{scratch}})",
                status=bool(p.get("with_status", False)))
