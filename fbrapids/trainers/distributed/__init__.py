"""Training beyond one process, on ``torch.distributed`` (gloo on the CPU, NCCL with one GPU per rank).

* :mod:`~fbrapids.trainers.distributed.buckets` - id -> virtual bucket -> rank;
* :mod:`~fbrapids.trainers.distributed.exchange` - the counted collectives of a step;
* :mod:`~fbrapids.trainers.distributed.sharded_store` - tables sharded by rows, one fused
  exchange of ids, rows and row gradients per step;
* :mod:`~fbrapids.trainers.distributed.consistency` - the ranks agree on the configuration at start-up;
* :mod:`~fbrapids.trainers.distributed.data` - each rank's share of the data;
* :mod:`~fbrapids.trainers.distributed.fit` - DDP dense layers + sharded tables, union metrics;
* :mod:`~fbrapids.trainers.distributed.checkpoint` - sharded checkpoints, resume at any world size;
* :mod:`~fbrapids.trainers.distributed.launch` - torchrun, or local ranks.

Example:
    >>> from fbrapids.trainers.distributed import BucketTable
    >>> BucketTable.default(2).n_buckets
    4096
"""

from fbrapids.trainers.distributed.buckets import N_BUCKETS, BucketTable
from fbrapids.trainers.distributed.checkpoint import restore_sharded, save_sharded, sharded_digest
from fbrapids.trainers.distributed.consistency import check_same_config, config_digest
from fbrapids.trainers.distributed.data import (
    LeaderFeed,
    RankSlices,
    concat_batches,
    per_rank_batch,
    shard_partitions,
    slice_batch,
    split_batches,
)
from fbrapids.trainers.distributed.fit import (
    DistributedTrainer,
    Ranks,
    evaluate_distributed,
    fit_distributed,
    predict_distributed,
)
from fbrapids.trainers.distributed.launch import init_from_env, init_rank, spawn
from fbrapids.trainers.distributed.sharded_store import ShardedEmbeddings, ShardedTable, rank_store_config

__all__ = ["N_BUCKETS", "BucketTable", "save_sharded", "restore_sharded", "sharded_digest", "check_same_config",
           "config_digest", "LeaderFeed", "RankSlices", "concat_batches", "per_rank_batch", "shard_partitions",
           "slice_batch", "split_batches", "DistributedTrainer", "Ranks", "fit_distributed", "evaluate_distributed",
           "predict_distributed", "init_from_env", "init_rank", "spawn", "ShardedEmbeddings", "ShardedTable", "rank_store_config"]
