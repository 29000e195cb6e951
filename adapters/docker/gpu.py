"""GPU assignment through Docker device requests (``--gpus``), which only a re-create can change.

A job with ``g`` GPUs gets an explicit list of device ids, the lowest ones not held by another
container on the host, so that two jobs never share a device by accident (``count=g`` would let the
NVIDIA runtime hand every container GPUs 0..g-1). Nothing here can be exercised without GPUs and the
NVIDIA container toolkit; the tests check the requests built, not a running GPU container.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from adapters.docker.errors import DockerAdapterError


def gpu_request(gpus: int, held: Iterable[str], total: int) -> dict[str, Any] | None:
    """``docker.types.DeviceRequest`` keyword arguments for ``gpus`` devices; ``None`` for none.

    ``held`` are device ids used by other containers on the host; ``total`` the host's GPU count.
    Raises a ``conflict`` error when not enough devices are free (the plan and the host disagree).
    """
    if gpus <= 0:
        return None
    taken = set(held)
    free = [str(i) for i in range(total) if str(i) not in taken]
    if len(free) < gpus:
        raise DockerAdapterError("conflict", f"{gpus} GPU(s) requested, {len(free)} free of {total} (held: {sorted(taken)})")
    return {"driver": "nvidia", "device_ids": free[:gpus], "capabilities": [["gpu"]]}
