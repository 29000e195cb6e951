"""GPU devices shared by fractional jobs (``gpu_milli``), as a policy's ledger hands them out.

A node's whole devices are counted (``Ledger.free[node][1]``: devices no job holds whole and no
fractional job shares); a shared device is numbered, with the milli-GPUs its fractional jobs use.
A fractional job goes best fit: a running job that stays keeps its ``gpu_device``; a newcomer takes
the shared device with the least room that still holds it (ties: lowest index), else opens the
lowest-numbered free device. So every baseline treats a fractional job as needing its fraction of
one device, and packs by milli-GPU like the Alibaba trace's GPU-sharing scheduler.
"""

from __future__ import annotations

from planner.devices import best_fit
from planner.snapshot import Job, Node


class SharedGpus:
    """Per node, the milli-GPUs used on each device; per fractional job, its device."""

    def __init__(self, nodes: list[Node]) -> None:
        self.load: dict[str, list[int]] = {n.name: [0] * n.gpus for n in nodes}
        self.device: dict[str, int] = {}

    def pick(self, node: str, job: Job, whole_free: int) -> int | None:
        """The device ``job`` (fractional) would get on ``node``; ``None``: none has room."""
        load = self.load[node]
        milli = job.gpu_milli or 0
        held = job.allocation.gpu_device if job.status == "running" and job.node == node and job.allocation else None
        if held is not None and held < len(load):
            return held  # a job that stays keeps its device
        return best_fit(load, milli, whole_free)

    def take(self, node: str, job: Job, device: int) -> int:
        """Put ``job`` on ``device``; returns how many whole devices that takes (1 if it was free)."""
        opened = int(self.load[node][device] == 0)
        self.load[node][device] += job.gpu_milli or 0
        self.device[job.id] = device
        return opened

    def give(self, node: str, job: Job) -> int:
        """Take ``job`` off its device; returns how many whole devices that frees (1 if now empty)."""
        device = self.device.pop(job.id)
        self.load[node][device] -= job.gpu_milli or 0
        return int(self.load[node][device] == 0)
