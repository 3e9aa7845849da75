"""The canonical workload's views (``shared/bench/WORKLOAD.md``) as ``.fbx`` method chains.

Sections 3 (clean) and 4 (join) of the workload, written once here and used by the demo,
the pipeline and the benchmarks, on eager or dask frames of either backend.

Example:
    >>> import tempfile
    >>> from fbrapids.datagen import generate
    >>> d = tempfile.mkdtemp(); _ = generate(1000, d)
    >>> views = read_views(d, eager=True)
    >>> joined = join_views(*clean_views(views))
    >>> int(joined["slot"].min()) >= 0
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fbrapids.views.read import read_view

VIEW_NAMES = ("impressions", "users", "ads", "basic")

IMPRESSION_CLEAN = dict(
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
               columns: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The four views of a workload folder (``impressions``, ``users``, ``ads``, ``basic``).

    Example:
        >>> import tempfile
        >>> from fbrapids.datagen import generate
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


def clean_views(views: dict[str, Any]) -> tuple[Any, Any, Any]:
    """Workload section 3: cleaned impressions, users and ads."""
    impressions = views["impressions"].fbx.clean(**IMPRESSION_CLEAN)
    users = views["users"].fbx.clean(fill=USER_FILL)
    ads = views["ads"].fbx.clean(fill=AD_FILL)
    return impressions, users, ads


def join_views(impressions: Any, users: Any, ads: Any, **join_options: Any) -> Any:
    """Workload section 4: left joins on user_id then ad_id, misses filled with defaults."""
    return (
        impressions.fbx.join(users, on="user_id", how="left", **join_options)
        .fbx.join(ads, on="ad_id", how="left", **join_options)
        .fbx.clean(fill=JOIN_MISS_FILL)
    )
