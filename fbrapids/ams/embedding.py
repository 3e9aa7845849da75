"""The trainable image embedding sub-model, and per-batch embedding of unique images.

:class:`ImageEmbeddingMLP` is the AMS sub-model: an MLP with PReLU activations, by default
4096 -> 256 -> 64 -> 12 as in "Image Matters" (Ge et al., 2018).

:class:`ImageEmbedder` embeds the image references of a batch.  With ``dedup=True`` (the
AMS way) every unique image id of the batch, across all behaviour sequences, ad images and
samples, has its raw vector read from the :class:`~fbrapids.ams.vectors.ImageVectorStore`
once and is run through the sub-model once; each reference then gathers its row by an
inverse index (``index_select``), so gradients from every reference sum into that one row
and flow back into the sub-model.  With ``dedup=False`` every reference is read and
embedded on its own: the same values and gradients, more work (the tests check they agree).

Each call leaves an :class:`ImageBatchReport` in ``embedder.last_report``: references vs
unique images, and raw-vector bytes vs embedding bytes moved (the paper's 340x: 4096-D
inputs against 12-D outputs).  ``embedder.totals`` sums the reports.

Example:
    >>> import torch
    >>> from fbrapids.ams.vectors import ImageVectorStore
    >>> store = ImageVectorStore.from_ids(range(10), dim=32)
    >>> emb = ImageEmbedder(store, ImageEmbeddingMLP([32, 16, 4]))
    >>> out = emb({"hist": torch.tensor([1, 2, 2, 3]), "ad": torch.tensor([2, 7])})
    >>> out["hist"].shape, emb.last_report.references, emb.last_report.unique_images
    (torch.Size([4, 4]), 6, 4)
    >>> emb.last_report.raw_bytes, emb.last_report.embedding_bytes
    (512, 64)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from fbrapids.ams.vectors import ImageVectorStore, as_u64
from fbrapids.errors import ArgumentError

PAPER_SIZES = (4096, 256, 64, 12)


class ImageEmbeddingMLP(nn.Module):
    """Linear layers with PReLU between them (and after the last one when ``final_prelu``).

    Args:
        sizes: widths from the raw vector to the embedding, e.g. ``(4096, 256, 64, 12)``.
        final_prelu: apply PReLU to the output too (default False: a linear embedding).

    Example:
        >>> m = ImageEmbeddingMLP((8, 4, 2))
        >>> m(torch.zeros(3, 8)).shape, [type(x).__name__ for x in m.net]
        (torch.Size([3, 2]), ['Linear', 'PReLU', 'Linear'])
    """

    def __init__(self, sizes: Sequence[int] = PAPER_SIZES, final_prelu: bool = False) -> None:
        super().__init__()
        if len(sizes) < 2:
            raise ArgumentError(f"ImageEmbeddingMLP needs at least an input and an output size, got {list(sizes)}")
        self.sizes = [int(s) for s in sizes]
        layers: list[nn.Module] = []
        for i in range(len(self.sizes) - 1):
            layers.append(nn.Linear(self.sizes[i], self.sizes[i + 1]))
            if i < len(self.sizes) - 2 or final_prelu:
                layers.append(nn.PReLU(self.sizes[i + 1]))
        self.net = nn.Sequential(*layers)

    @property
    def in_dim(self) -> int:
        return self.sizes[0]

    @property
    def out_dim(self) -> int:
        return self.sizes[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@dataclass
class ImageBatchReport:
    """What one batch's image embedding read and moved.

    Attributes:
        references: image references in the batch (every behaviour of every sample, plus ads).
        unique_images: distinct image ids among them.
        unknown_references: references to ids the vector store does not hold (they read
            its default vector).
        raw_bytes: bytes of raw vectors read from the store and fed to the sub-model
            (``unique_images * in_dim * 4`` with dedup, ``references * in_dim * 4`` without).
        embedding_bytes: bytes of embeddings the sub-model produced and handed on.
        per_reference_raw_bytes: what storing / moving raw vectors per reference would cost
            (``references * in_dim * 4``), the baseline AMS avoids.
    """

    references: int = 0
    unique_images: int = 0
    unknown_references: int = 0
    raw_bytes: int = 0
    embedding_bytes: int = 0
    per_reference_raw_bytes: int = 0

    @property
    def dedup_ratio(self) -> float:
        """References per unique image."""
        return self.references / self.unique_images if self.unique_images else 1.0

    @property
    def communication_saving(self) -> float:
        """Raw-vector bytes over embedding bytes (``in_dim / out_dim`` per image)."""
        return self.raw_bytes / self.embedding_bytes if self.embedding_bytes else float("nan")

    def __iadd__(self, o: "ImageBatchReport") -> "ImageBatchReport":
        for k, v in asdict(o).items():
            setattr(self, k, getattr(self, k) + v)
        return self

    def as_dict(self) -> dict[str, float]:
        d: dict[str, float] = dict(asdict(self))
        d["dedup_ratio"] = self.dedup_ratio
        d["communication_saving"] = self.communication_saving
        return d


class ImageEmbedder(nn.Module):
    """Embeds a batch's image references through a trainable sub-model (module docstring).

    Args:
        store: raw vectors keyed by image id (not a parameter; not in ``state_dict``).
        model: the sub-model; its input width must equal ``store.dim``.
        dedup: embed each unique image id once per call (default), or every reference.
    """

    def __init__(self, store: ImageVectorStore, model: ImageEmbeddingMLP | nn.Module, dedup: bool = True) -> None:
        super().__init__()
        in_dim = getattr(model, "in_dim", store.dim)
        if in_dim != store.dim:
            raise ArgumentError(f"image sub-model takes {in_dim}-D vectors, the store holds {store.dim}-D ones")
        self.store = store
        self.model = model
        self.dedup = dedup
        self.last_report = ImageBatchReport()
        self.totals = ImageBatchReport()

    @property
    def out_dim(self) -> int:
        return int(getattr(self.model, "out_dim"))

    def _device_dtype(self) -> tuple[torch.device, torch.dtype]:
        p = next(self.model.parameters(), None)
        return (p.device, p.dtype) if p is not None else (torch.device("cpu"), torch.float32)

    def embed_ids(self, ids: torch.Tensor | np.ndarray) -> torch.Tensor:
        """Embeddings ``[len(ids), out_dim]`` of one id array (see :meth:`forward`)."""
        return self({"ids": torch.as_tensor(np.asarray(ids)) if isinstance(ids, np.ndarray) else ids})["ids"]

    def forward(self, refs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """name -> embeddings ``[len(ids), out_dim]``, one row per reference in ``refs[name]``.

        All names are embedded together: with ``dedup`` each unique id once across them.
        """
        names = list(refs)
        keys = [as_u64(refs[n]) for n in names]
        sizes = [len(k) for k in keys]
        allk = np.concatenate(keys) if keys else np.zeros(0, dtype=np.uint64)
        dev, dtype = self._device_dtype()
        in_dim = self.store.dim
        if self.dedup:
            inverse, uniq = pd.factorize(allk, sort=False)
            raw, unknown_u = self.store.get(uniq)
            emb_u = self.model(torch.from_numpy(raw).to(dev, dtype))
            emb = emb_u.index_select(0, torch.from_numpy(inverse.astype(np.int64)).to(dev))
            n_unique, n_fed = len(uniq), len(uniq)
            unknown = int(np.bincount(inverse, minlength=len(uniq))[unknown_u].sum()) if len(uniq) else 0
        else:
            raw, unknown_r = self.store.get(allk)
            emb = self.model(torch.from_numpy(raw).to(dev, dtype))
            n_unique, n_fed = len(pd.unique(allk)), len(allk)
            unknown = int(unknown_r.sum())
        out_dim = int(emb.shape[1]) if emb.ndim == 2 else self.out_dim
        rep = ImageBatchReport(references=len(allk), unique_images=n_unique, unknown_references=unknown,
                               raw_bytes=n_fed * in_dim * 4, embedding_bytes=n_fed * out_dim * 4,
                               per_reference_raw_bytes=len(allk) * in_dim * 4)
        self.last_report = rep
        self.totals += rep
        return dict(zip(names, torch.split(emb, sizes, dim=0)))
