"""AMS on a dask cluster: image vectors partitioned across workers, embedded where they live.

:class:`ShardedImageVectors` places each image's raw vector on one worker (the owner of an
id is ``splitmix64(id) % n_workers``), as a worker-resident
:class:`~fbrapids.ams.vectors.ImageVectorStore` shard.  :meth:`ShardedImageVectors.synthetic`
builds every shard on its worker from the ids alone, so no raw vector ever crosses the
network; :meth:`ShardedImageVectors.from_store` ships an existing store's rows to their
owners once, at set-up.

:class:`DaskImageEmbedder` is a drop-in for :class:`~fbrapids.ams.embedding.ImageEmbedder`
(same ``forward(refs) -> {name: [n, out_dim]}``, ``last_report``, ``totals``, ``model``),
so :class:`~fbrapids.ams.dicm.DICM` trains with it unchanged.  Per batch, the unique image
ids are routed to their owners; each owner runs the sub-model (with the current weights,
sent with the task) over its local vectors and returns only the embeddings.  The backward
pass sends each owner the gradient of its embeddings; the owner recomputes its forward,
back-propagates, and returns the sub-model's parameter gradients, which are summed into
``model``'s ``.grad`` (a ``torch.autograd.Function``), so ``fit``'s optimizer steps the
sub-model as usual.  ``last_traffic`` counts the bytes that crossed the network in the
batch: ids out, embeddings back, weights out, embedding gradients out, parameter
gradients back; ``raw_vector_bytes`` stays 0.

This is the AMS data flow (vectors stay put, embeddings and gradients travel) on dask
futures; it is synchronous (one round trip per forward and per backward) and the parameter
gradients are dense (for the paper's 4096->256->64->12 MLP, about 4.2 MB per worker per
step).  ``docs/ams-on-dask.md`` discusses what a production version would change.

Example:
    >>> import torch, distributed  # doctest: +SKIP
    >>> client = distributed.Client(distributed.LocalCluster(n_workers=2, processes=True))  # doctest: +SKIP
    >>> vectors = ShardedImageVectors.synthetic(client, range(1000), dim=64)  # doctest: +SKIP
    >>> emb = DaskImageEmbedder(vectors, ImageEmbeddingMLP([64, 16, 4]))  # doctest: +SKIP
    >>> emb({"hist": torch.tensor([1, 2, 2])})["hist"].shape  # doctest: +SKIP
    torch.Size([3, 4])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from fbrapids.ams.embedding import ImageBatchReport, ImageEmbeddingMLP
from fbrapids.ams.vectors import Ids, ImageVectorStore, as_u64, splitmix64, synthetic_vectors
from fbrapids.errors import ArgumentError, ClusterError

if TYPE_CHECKING:  # (annotations only: distributed is imported where a cluster is used)
    from distributed import Client, Future


def owner_of(ids: Ids, n_workers: int) -> np.ndarray:
    """The worker index owning each image id: ``splitmix64(id) % n_workers``.

    Example:
        >>> owner_of([1, 2, 3], 1).tolist()
        [0, 0, 0]
    """
    return (splitmix64(as_u64(ids)) % np.uint64(n_workers)).astype(np.int64)


# -- worker-side functions (run inside dask worker processes) -----------------------------------
_WORKER_MODELS: dict[tuple, ImageEmbeddingMLP] = {}


def _shard_from_arrays(ids: np.ndarray, vectors: np.ndarray) -> ImageVectorStore:
    return ImageVectorStore(ids, np.ascontiguousarray(vectors, dtype=np.float32))


def _shard_synthetic(ids: np.ndarray, dim: int, seed: int) -> ImageVectorStore:
    return ImageVectorStore(ids, synthetic_vectors(ids, dim, seed))


def _shard_len(shard: ImageVectorStore) -> int:
    return len(shard)


def _worker_model(sizes: tuple[int, ...], final_prelu: bool, state: Mapping[str, np.ndarray]) -> ImageEmbeddingMLP:
    torch.set_num_threads(1)
    key = (sizes, final_prelu)
    m = _WORKER_MODELS.get(key)
    if m is None:
        m = _WORKER_MODELS[key] = ImageEmbeddingMLP(sizes, final_prelu=final_prelu)
    m.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    return m


def _embed_on_owner(shard: ImageVectorStore, ids: np.ndarray, sizes: tuple[int, ...], final_prelu: bool,
                    state: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    raw, unknown = shard.get(ids)
    with torch.no_grad():
        emb = _worker_model(sizes, final_prelu, state)(torch.from_numpy(raw))
    return emb.numpy(), unknown


def _grad_on_owner(shard: ImageVectorStore, ids: np.ndarray, sizes: tuple[int, ...], final_prelu: bool,
                   state: Mapping[str, np.ndarray], grad_out: np.ndarray) -> dict[str, np.ndarray]:
    raw, _ = shard.get(ids)
    m = _worker_model(sizes, final_prelu, state)
    m.zero_grad(set_to_none=True)
    m(torch.from_numpy(raw)).backward(torch.from_numpy(grad_out))
    grads = {}
    for k, p in m.named_parameters():
        if p.grad is None:
            raise ClusterError(f"the image model's parameter {k} got no gradient on the owner")
        grads[k] = p.grad.numpy().copy()
    return grads


# -- driver side ---------------------------------------------------------------------------------
def _built(shards: Sequence[Future]) -> None:
    """Wait for the shards without moving them; raise the first error."""
    from distributed import wait

    wait(shards)
    for f in shards:
        if f.status == "error":
            f.result()


class ShardedImageVectors:
    """Image vectors partitioned across the workers of a dask ``Client`` (module docstring)."""

    def __init__(self, client: Client, shards: Sequence[Future], workers: Sequence[str], dim: int) -> None:
        self.client = client
        self.shards = list(shards)
        self.workers = list(workers)
        self.dim = int(dim)

    @staticmethod
    def _workers(client: Client) -> list[str]:
        workers = sorted(client.scheduler_info()["workers"])
        if not workers:
            raise ClusterError("the dask cluster has no workers")
        return workers

    @classmethod
    def synthetic(cls, client: Client, ids: Ids, dim: int, seed: int = 0) -> "ShardedImageVectors":
        """Shards of :func:`synthetic_vectors`, each built on its worker from its ids."""
        workers = cls._workers(client)
        u = pd.unique(as_u64(ids))
        own = owner_of(u, len(workers))
        shards = [client.submit(_shard_synthetic, u[own == w], dim, seed, workers=[addr], pure=False)
                  for w, addr in enumerate(workers)]
        _built(shards)
        return cls(client, shards, workers, dim)

    @classmethod
    def from_store(cls, client: Client, store: ImageVectorStore) -> "ShardedImageVectors":
        """Ship ``store``'s rows to their owners (once, at set-up)."""
        workers = cls._workers(client)
        ids = store.index.to_numpy()
        own = owner_of(ids, len(workers))
        shards = []
        for w, addr in enumerate(workers):
            sel = np.flatnonzero(own == w)
            shards.append(client.submit(_shard_from_arrays, ids[sel], np.asarray(store.vectors[sel]),
                                        workers=[addr], pure=False))
        _built(shards)
        return cls(client, shards, workers, store.dim)

    def sizes(self) -> list[int]:
        """Vectors held by each worker's shard."""
        return self.client.gather([self.client.submit(_shard_len, s, workers=[a], pure=False)
                                   for s, a in zip(self.shards, self.workers)])


class _RemoteEmbed(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, run: "_Round", *params: torch.Tensor) -> torch.Tensor:
        ctx.run = run
        return run.forward()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return (None, *ctx.run.backward(grad))


class _Round:
    """One batch's unique ids, routed to their owners, with the weights of this forward."""

    def __init__(self, emb: "DaskImageEmbedder", uniq: np.ndarray) -> None:
        self.emb = emb
        vec = emb.vectors
        own = owner_of(uniq, len(vec.workers))
        self.parts = [(w, np.flatnonzero(own == w)) for w in range(len(vec.workers))]
        self.parts = [(w, pos) for w, pos in self.parts if len(pos)]
        self.ids = uniq
        self.names = [k for k, _ in emb.model.named_parameters()]
        self.state = {k: v.detach().cpu().numpy().copy() for k, v in emb.model.state_dict().items()}
        self.traffic = dict.fromkeys(("ids_bytes", "embedding_bytes", "weight_bytes", "embedding_grad_bytes",
                                      "param_grad_bytes", "raw_vector_bytes"), 0)
        self.unknown = np.zeros(len(uniq), dtype=bool)

    def _submit(self, fn: Callable[..., object], w: int, pos: np.ndarray, *extra: np.ndarray) -> Future:
        vec, m = self.emb.vectors, self.emb.model
        return vec.client.submit(fn, vec.shards[w], self.ids[pos], tuple(m.sizes), self.emb.final_prelu,
                                 self.state, *extra, workers=[vec.workers[w]], pure=False)

    def forward(self) -> torch.Tensor:
        weight_bytes = sum(v.nbytes for v in self.state.values())
        futures = [self._submit(_embed_on_owner, w, pos) for w, pos in self.parts]
        out = torch.zeros((len(self.ids), self.emb.out_dim), dtype=torch.float32)
        for (w, pos), (e, unknown) in zip(self.parts, self.emb.vectors.client.gather(futures)):
            out[torch.from_numpy(pos)] = torch.from_numpy(e)
            self.unknown[pos] = unknown
            self.traffic["ids_bytes"] += pos.size * 8
            self.traffic["embedding_bytes"] += e.nbytes
            self.traffic["weight_bytes"] += weight_bytes
        return out

    def backward(self, grad: torch.Tensor) -> list[torch.Tensor]:
        g = grad.detach().cpu().float().numpy()
        futures = [self._submit(_grad_on_owner, w, pos, np.ascontiguousarray(g[pos])) for w, pos in self.parts]
        total: dict[str, np.ndarray] = {}
        weight_bytes = sum(v.nbytes for v in self.state.values())
        for (w, pos), grads in zip(self.parts, self.emb.vectors.client.gather(futures)):
            self.traffic["embedding_grad_bytes"] += g[pos].nbytes
            self.traffic["weight_bytes"] += weight_bytes
            for k, v in grads.items():
                self.traffic["param_grad_bytes"] += v.nbytes
                total[k] = total[k] + v if k in total else v
        self.emb.last_traffic = dict(self.traffic)
        params = dict(self.emb.model.named_parameters())
        return [torch.from_numpy(total[k]).to(params[k].device, params[k].dtype) if k in total
                else torch.zeros_like(params[k]) for k in self.names]


class DaskImageEmbedder(nn.Module):
    """:class:`~fbrapids.ams.embedding.ImageEmbedder` over :class:`ShardedImageVectors`:
    each unique image of a batch embedded once, on the worker holding its vector.

    Args:
        vectors: the sharded vectors.
        model: the sub-model (trained on the driver; its weights travel with each task).
    """

    def __init__(self, vectors: ShardedImageVectors, model: ImageEmbeddingMLP) -> None:
        super().__init__()
        if model.in_dim != vectors.dim:
            raise ArgumentError(f"image sub-model takes {model.in_dim}-D vectors, the shards hold {vectors.dim}-D ones")
        self.vectors = vectors
        self.model = model
        self.final_prelu = isinstance(model.net[-1], nn.PReLU)
        self.dedup = True
        self.last_report = ImageBatchReport()
        self.totals = ImageBatchReport()
        self.last_traffic: dict[str, int] = {}

    @property
    def out_dim(self) -> int:
        return self.model.out_dim

    def forward(self, refs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        names = list(refs)
        keys = [as_u64(refs[n]) for n in names]
        sizes = [len(k) for k in keys]
        allk = np.concatenate(keys) if keys else np.zeros(0, dtype=np.uint64)
        inverse, uniq = pd.factorize(allk, sort=False)
        run = _Round(self, np.asarray(uniq, dtype=np.uint64))
        params = [p for _, p in self.model.named_parameters()]
        emb_u = _RemoteEmbed.apply(run, *params) if len(uniq) else torch.zeros((0, self.out_dim))
        dev = params[0].device if params else torch.device("cpu")
        emb = emb_u.to(dev).index_select(0, torch.from_numpy(inverse.astype(np.int64)).to(dev))
        n_unknown_refs = int(np.bincount(inverse, minlength=len(uniq))[run.unknown].sum()) if len(uniq) else 0
        rep = ImageBatchReport(references=len(allk), unique_images=len(uniq), unknown_references=n_unknown_refs,
                               raw_bytes=len(uniq) * self.vectors.dim * 4,
                               embedding_bytes=len(uniq) * self.out_dim * 4,
                               per_reference_raw_bytes=len(allk) * self.vectors.dim * 4)
        self.last_report = rep
        self.totals += rep
        self.last_traffic = dict(run.traffic)
        return dict(zip(names, torch.split(emb, sizes, dim=0)))
