"""Local ranks on their own devices: ``fbrapids demo --nproc 2`` picked NCCL
(the launcher's default on a CUDA machine) and left every rank's stores on GPU 0.

The placement rule (:func:`~fbrapids.trainers.distributed.launch.place_ranks`) is pure and
takes the device count as an argument; the CLI run stands in for a 2-GPU machine through
torch's own answers (``torch.cuda.is_available`` / ``device_count``), the one thing this
CPU machine cannot give: the launcher, its refusal and the CLI run as they are.
"""

from __future__ import annotations

import pytest
import torch

from fbrapids.errors import DistributedError


@pytest.mark.parametrize("nproc, backend, device, count, want", [
    (2, None, "cuda", 2, ("nccl", ("cuda:0", "cuda:1"))),  # rank r on GPU r, NCCL
    (4, None, "cuda", 8, ("nccl", ("cuda:0", "cuda:1", "cuda:2", "cuda:3"))),
    (3, "gloo", "cuda", 2, ("gloo", ("cuda:0", "cuda:1", "cuda:0"))),  # gloo: ranks may share
    (1, None, "cuda", 1, ("nccl", ("cuda:0",))),
    (3, None, "cpu", 0, ("gloo", ("cpu", "cpu", "cpu"))),  # the backend follows the device
    (2, "gloo", "cpu", 4, ("gloo", ("cpu", "cpu"))),
])
def test_each_rank_gets_a_device_of_its_own(nproc, backend, device, count, want):
    from fbrapids.trainers.distributed.launch import RankPlacement, place_ranks

    got = place_ranks(nproc, backend, device, count)
    assert got == RankPlacement(*want)
    if got.backend == "nccl":
        assert len(set(got.devices)) == nproc  # NCCL refuses two ranks on one GPU


@pytest.mark.parametrize("nproc, backend, device, count, says", [
    (3, None, "cuda", 2, "3 ranks on NCCL need 3 GPUs, one per rank, and 2 are visible"),
    (2, "nccl", "cuda", 1, "2 ranks on NCCL need 2 GPUs, one per rank, and 1 is visible"),
    (2, "nccl", "cpu", 0, "NCCL needs a CUDA device per rank"),
    (2, None, "cuda", 0, "no CUDA device is visible"),
    (2, "mpi", "cpu", 0, "'mpi' is not one of gloo, nccl"),
])
def test_impossible_placements_are_one_line(nproc, backend, device, count, says):
    from fbrapids.trainers.distributed.launch import place_ranks

    with pytest.raises(DistributedError, match=says) as err:
        place_ranks(nproc, backend, device, count)
    assert "\n" not in str(err.value)


@pytest.fixture
def two_gpus(monkeypatch):
    """This machine as a 2-GPU one, as far as torch tells it (nothing here allocates on CUDA)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("FBRAPIDS_DEVICE", "cuda")  # the device rule: train on CUDA


def test_demo_refuses_more_nccl_ranks_than_gpus_before_any_work(two_gpus, tmp_path, capsys):
    from fbrapids.app.cli import main

    data = tmp_path / "data"
    rc = main(["demo", "--nproc", "3", "--batch-size", "3072", "--rows", "100", "--data-dir", str(data)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "3 ranks on NCCL need 3 GPUs" in err and "--dist-backend gloo" in err
    assert not data.exists()  # refused before the data was generated


def test_the_cli_chooses_the_process_group_backend(two_gpus):
    from fbrapids.app.cli import build_parser, check_arguments
    from fbrapids.errors import UsageError
    from fbrapids.trainers.distributed.launch import RankPlacement, local_placement

    args = build_parser().parse_args(["demo", "--nproc", "3", "--batch-size", "3072", "--dist-backend", "gloo"])
    check_arguments(args)
    assert local_placement(3, args.dist_backend).devices == ("cuda:0", "cuda:1", "cuda:0")
    assert local_placement(2, None) == RankPlacement("nccl", ("cuda:0", "cuda:1"))
    with pytest.raises(UsageError, match="--dist-backend"):
        check_arguments(build_parser().parse_args(["demo", "--dist-backend", "nccl"]))
