"""Functions that tests run on real ranks through `samedevice.ranks.launch`."""

from __future__ import annotations

import time
from pathlib import Path

import torch


def fail_on_rank_1(rank: int, world_size: int, device: torch.device, workdir: Path) -> int:
    """Rank 1 raises at once; rank 0 waits for it in a collective that never completes."""
    if rank == 1:
        raise ValueError("this rank cannot start: nothing to load")
    torch.distributed.barrier()
    return rank


def assert_on_rank_1(rank: int, world_size: int, device: torch.device, workdir: Path) -> int:
    """Rank 1 fails a bare `assert`, an error without a message."""
    assert rank != 1
    torch.distributed.barrier()
    return rank


def hang(rank: int, world_size: int, device: torch.device, workdir: Path) -> int:
    time.sleep(600)
    return rank
