"""Frames and where they run: the backend (pandas / dask on the CPU, cudf / dask-cudf on the
GPU), the dask cluster, one pass over a dask frame's partitions, dask tokens, the accessor's
import hooks and the GPU probe."""
