"""torch.distributed set-up for ``torchrun --nproc_per_node N``: one learner per device, its own env workers.

Backend by device: hccl (Ascend NPU), nccl (CUDA), gloo (CPU). Without torchrun's environment variables
everything here is a no-op and the trainer runs as a single process.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from diffpolicy_ros.config import ConfigError
from diffpolicy_ros.device import device_type, resolve_device
from diffpolicy_ros.errors import UserError

BACKENDS = {"npu": "hccl", "cuda": "nccl", "cpu": "gloo"}


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    device: str = "cpu"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


SINGLE = DistInfo()  # one process: no torchrun
COLLECTIVE_TIMEOUT = datetime.timedelta(hours=2)


def torchrun_environment() -> tuple[int, int, int]:
    """(world size, rank, local rank) from the variables torchrun sets, checked: a half-set or hand-edited
    environment is one line naming the variable, not a rendezvous traceback. (1, 0, 0) without them."""
    fix = "torchrun sets it; unset it to run as one process"
    values = []
    for name, default in (("WORLD_SIZE", "1"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        text = os.environ.get(name, default)
        try:
            values.append(int(text))
        except ValueError:
            raise UserError(f"torchrun environment: {name}={text!r} is not an integer ({fix})") from None
    world, rank, local_rank = values
    if world < 1 or not 0 <= rank < world or local_rank < 0:
        raise UserError(f"torchrun environment: RANK={rank}, LOCAL_RANK={local_rank} with WORLD_SIZE={world}: "
                        f"a rank is 0..WORLD_SIZE-1 ({fix})")  # fmt: skip
    if world > 1:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
        if missing:
            raise UserError(
                f"torchrun environment: WORLD_SIZE={world} without {' and '.join(missing)}: start the job with "
                "torchrun (which sets them), or unset WORLD_SIZE to run as one process"
            )
        port = os.environ["MASTER_PORT"]
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise UserError(f"torchrun environment: MASTER_PORT={port!r} is not a port number ({fix})")
    return world, rank, local_rank


def init_distributed(requested_device: str) -> DistInfo:
    """Resolve this rank's device (``LOCAL_RANK`` picks the index) and join the process group if launched
    by torchrun."""
    world, _, local_rank = torchrun_environment()
    device = resolve_device(requested_device, index=local_rank)
    if world <= 1:
        return DistInfo(0, 1, device)
    if not dist.is_initialized():
        backend = BACKENDS[device_type(device)]
        if device_type(device) == "cuda":
            torch.cuda.set_device(device)
        # rank 0 evaluates alone while the others wait in their next collective: longer than the default 30 min
        dist.init_process_group(backend=backend, timeout=COLLECTIVE_TIMEOUT)
    return DistInfo(dist.get_rank(), dist.get_world_size(), device)


def broadcast_object(info: DistInfo, obj: Any) -> Any:
    """Rank 0's value of ``obj`` on every rank (e.g. the run directory's timestamped name)."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(info: DistInfo, obj: Any) -> list[Any]:
    """Every rank's ``obj`` (in rank order) on every rank."""
    if not info.enabled:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def mean_across_ranks(info: DistInfo, values: dict[str, float]) -> dict[str, float]:
    """Average scalar metrics over ranks (one all-reduce for the whole dict)."""
    if not info.enabled or not values:
        return values
    keys = sorted(values)
    tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float32)  # NPUs: no float64
    if device_type(info.device) != "cpu":
        tensor = tensor.to(info.device)
    dist.all_reduce(tensor)
    return {k: float(v) / info.world_size for k, v in zip(keys, tensor.tolist())}


def average_gradients(info: DistInfo, params: list[torch.nn.Parameter], loss: torch.Tensor) -> float:
    """After each rank's ``backward`` on its own batch: every rank's gradients replaced by their mean over ranks
    (what DDP's all-reduce does, here for training loops that are not one ``forward``: both stages of BC), in one
    all-reduce that also carries the loss; returns the loss averaged over ranks (the loss of the global batch)."""
    if not info.enabled:
        return float(loss.item())
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1).float() for g in grads] + [loss.detach().reshape(1).float()])
    dist.all_reduce(flat)
    flat /= info.world_size
    offset = 0
    for param, grad in zip(params, grads):
        param.grad = flat[offset : offset + grad.numel()].view_as(grad).to(grad.dtype)
        offset += grad.numel()
    return float(flat[-1].item())


def rank_batch(info: DistInfo, batch_size: int) -> int:
    """Each rank's part of a global batch of ``batch_size`` (which the ranks must divide evenly)."""
    if batch_size % info.world_size:
        raise ConfigError(f"batch size {batch_size} is not a multiple of the {info.world_size} ranks")
    return batch_size // info.world_size


def shard(info: DistInfo, indices: np.ndarray) -> np.ndarray:
    """This rank's share of ``indices`` (every world_size-th, from its rank): each rank samples its own."""
    return indices[info.rank :: info.world_size]


def broadcast_parameters(info: DistInfo, module: torch.nn.Module) -> None:
    """Copy rank 0's parameters and buffers to every rank (the same start, whatever each rank's RNG did)."""
    if info.enabled:
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=0)


def broadcast_buffers(info: DistInfo, module: torch.nn.Module) -> None:
    """Copy rank 0's buffers (e.g. freshly fitted normalizer statistics) to every rank."""
    if info.enabled:
        for buf in module.buffers():
            dist.broadcast(buf, src=0)


def in_sync(info: DistInfo, module: torch.nn.Module) -> bool:
    """Whether every rank holds the same parameters (a checksum per rank; DDP should guarantee it)."""
    checksum = float(sum(p.detach().cpu().double().sum() for p in module.parameters()))  # float64 on the host
    return len(set(gather_objects(info, checksum))) == 1


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def shutdown(info: DistInfo, finished: bool = True) -> None:
    """Leave the process group; ``finished``: once every rank is done with it. Without that barrier a rank that
    finishes first destroys its side while another still communicates, and gloo can abort at exit ("terminate
    called without an active exception"). A rank leaving on an exception does not wait: torchrun stops the
    others."""
    if info.enabled and dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()
