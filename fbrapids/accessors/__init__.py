"""The ``.fbx`` accessor, registered on pandas, dask, and (when importable) cudf frames."""

from fbrapids.accessors.fbx import FbxAccessor, register_accessors

__all__ = ["FbxAccessor", "register_accessors"]
