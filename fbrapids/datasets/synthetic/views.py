"""The canonical workload's views (``docs/workload.md``) as ``.fbx`` method chains.

Sections 3 (clean) and 4 (join) of the workload, written once here and used by the demo,
the pipeline and the benchmarks, on eager or dask frames of either backend.

Example:
    >>> import tempfile
    >>> from fbrapids.datasets.synthetic.generate import generate
    >>> d = tempfile.mkdtemp(); _ = generate(1000, d)
    >>> views = read_views(d, eager=True)
    >>> joined = join_views(*clean_views(views))
    >>> int(joined["slot"].min()) >= 0
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from fbrapids.views.read import read_view

if TYPE_CHECKING:  # (annotations only: no import at run time)
    from fbrapids.frames.backend import FrameLike
    from fbrapids.kernels import Expr

VIEW_NAMES = ("impressions", "users", "ads", "basic")

IMPRESSION_CLEAN: dict[str, Any] = dict(
    where="slot >= 0",
    json={"ctx": {"os": "device.os", "geo_city": "geo.city"}},
    fill={"query": "", "os": "", "geo_city": ""},
    drop=["ctx"],
)
USER_FILL = {"age": -1, "gender": "unk", "city": "", "interests": ""}
AD_FILL = {"price": 0.0, "title": ""}
# defaults for impressions without a matching user / ad (section 4.2)
JOIN_MISS_FILL = {**USER_FILL, "title": "", "category": -1, "price": 0.0, "advertiser_id": -1}


def read_views(data_dir: str | Path, eager: bool = False, backend: str | None = None,
               columns: dict[str, list[str]] | None = None) -> dict[str, FrameLike]:
    """The four views of a workload folder (``impressions``, ``users``, ``ads``, ``basic``).

    Example:
        >>> import tempfile
        >>> from fbrapids.datasets.synthetic.generate import generate
        >>> d = tempfile.mkdtemp(); _ = generate(500, d)
        >>> sorted(read_views(d))
        ['ads', 'basic', 'impressions', 'users']
    """
    root = Path(data_dir)
    columns = columns or {}
    return {
        name: read_view(root / f"{name}.parquet", columns=columns.get(name), eager=eager, backend=backend)
        for name in VIEW_NAMES
    }


def clean_views(views: Mapping[str, FrameLike]) -> tuple[FrameLike, FrameLike, FrameLike]:
    """Workload section 3: cleaned impressions, users and ads."""
    impressions = views["impressions"].fbx.clean(**IMPRESSION_CLEAN)
    users = views["users"].fbx.clean(fill=USER_FILL)
    ads = views["ads"].fbx.clean(fill=AD_FILL)
    return impressions, users, ads


def join_views(impressions: FrameLike, users: FrameLike, ads: FrameLike, **join_options: object) -> FrameLike:
    """Workload section 4: left joins on user_id then ad_id, misses filled with defaults."""
    return (
        impressions.fbx.join(users, on="user_id", how="left", **join_options)
        .fbx.join(ads, on="ad_id", how="left", **join_options)
        .fbx.clean(fill=JOIN_MISS_FILL)
    )


# -- section 5: the features -------------------------------------------------------------
B_ID, B_CAT, B_TOK, B_CROSS = 1 << 20, 1 << 16, 1 << 18, 1 << 20
AGE_BOUNDS = (0, 18, 25, 35, 45, 55, 65)
PRICE_BOUNDS = (0, 1, 2, 3, 4, 5, 6)


def features() -> dict[str, Expr]:
    """The workload's extracted columns (section 5) as feature expressions over ``fbrapids.ops``.

    Shared sub-expressions (the token lists, ``hour``) are written once and computed once.

    Example:
        >>> f = features()
        >>> len(f), str(f["user_ad_h"])
        (20, "cross(user_id, ad_id, buckets=1048576, cap=None, sep='_')")
    """
    from fbrapids import ops

    query_tokens = ops.split("query", " ")
    hour = ops.hour("ts")
    query_tok_h = ops.split("query", " ", buckets=B_TOK)
    title_tok_h = ops.split("title", " ", buckets=B_TOK)
    return {
        "hour": ops.cast(hour, "i8"),
        "weekday": ops.cast(ops.weekday("ts"), "i8"),
        "user_id_h": ops.hash_bucket("user_id", B_ID),
        "ad_id_h": ops.hash_bucket("ad_id", B_ID),
        "advertiser_h": ops.hash_bucket("advertiser_id", B_CAT),
        "gender_h": ops.hash_bucket("gender", B_CAT),
        "city_h": ops.hash_bucket("city", B_CAT),
        "os_h": ops.hash_bucket("os", B_CAT),
        "geo_city_h": ops.hash_bucket("geo_city", B_CAT),
        "age_b": ops.cast(ops.bucketize("age", AGE_BOUNDS), "i8"),
        "price_b": ops.cast(ops.bucketize(ops.log1p("price"), PRICE_BOUNDS), "i8"),
        "query_len": ops.length(query_tokens),
        "query_tok_h": query_tok_h,
        "query_bigram_h": ops.ngrams(query_tokens, 2, sep=" ", buckets=B_CROSS),
        "title_tok_h": title_tok_h,
        "interest_h": ops.split("interests", "|", buckets=B_CAT),
        "qxt_cross_h": ops.cross(query_tok_h, title_tok_h, buckets=B_CROSS, cap=64),
        "user_ad_h": ops.cross("user_id", "ad_id", buckets=B_CROSS),
        "cat_city_h": ops.cross("category", "city", buckets=B_CROSS),
        "hour_cat_h": ops.cross(hour, "category", buckets=B_CROSS),
    }


def derived_features() -> dict[str, Expr]:
    """The features the demo's own feature trials added to the workload's (docs/models.md: the
    trial table): how the query and the ad's title overlap, which the hashed token cross
    ``qxt_cross_h`` can memorise pair by pair but cannot say.

    * ``qt_first_eq``: 1 when the query's first word is the title's first word, else 0;
    * ``qt_overlap``: how many of the query's words are words of the title.

    Sparse ids (a table each): the demo's models embed them.

    Example:
        >>> sorted(derived_features()), str(derived_features()["qt_first_eq"]).split("(")[0]
        (['qt_first_eq', 'qt_overlap'], 'overlap_count')
    """
    from fbrapids import ops

    query, title = ops.split("query", " "), ops.split("title", " ")
    return {"qt_first_eq": ops.overlap_count(ops.first_k(query, 1), ops.first_k(title, 1)),
            "qt_overlap": ops.overlap_count(query, title)}


def extract_features(joined: FrameLike) -> FrameLike:
    """Workload section 5 on a joined frame: adds the feature columns."""
    return joined.fbx.extract(**features())


def merge_basic(extracted: FrameLike, basic: FrameLike) -> FrameLike:
    """Workload section 6: inner join with the basic features on instance_id."""
    return extracted.fbx.join(basic, on="instance_id", how="inner")
