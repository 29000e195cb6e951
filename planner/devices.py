"""GPU devices after the solve: which device each fractional job shares, and who does not fit.

The integer program sees a node's GPUs as one pool of ``gpus * 1000`` milli-GPUs (the aggregate
relaxation: a whole GPU is 1000, a fraction its ``gpu_milli``), so it cannot see fragmentation: two
jobs of 600 milli fit 1200 of a 2-GPU node's 2000, but three do not fit its two devices. This step
numbers the devices, node by node, deterministically:

1. running jobs that stay on their node keep what they hold: a fractional job its ``gpu_device``,
   a whole-GPU job its count of whole devices (whole devices are counted, not numbered);
2. whole-GPU newcomers take devices no fractional job shares, largest first;
3. fractional newcomers are packed best-fit decreasing: largest ``gpu_milli`` first (ties: problem
   order), onto the shared device with the least room that still fits (ties: lowest index), else
   onto the lowest-numbered free device.

A newcomer that does not fit its chosen node is offered its other options (another node, cheapest
first) where both the pool and a device have room (so the relaxation's blind spot does not starve it
interval after interval); failing that, a running job that was to move stays where it runs, on the
device it holds, if that room is still free (a move the devices cannot take is no reason to pause
it); otherwise it is set to its no-node option (wait, or pause), with a reason that names the
fragmentation. The room a packed-out job leaves then goes first to running jobs the solver paused
(back where they run, on their device: a pause made for a newcomer the devices did not take bought
nothing; :func:`_unpause`), then to pending jobs the solver left waiting, where it fits a device
and lowers the objective (:func:`_fill`). ``Packing.devices`` says
what every node's devices hold after this, for the widening that then offers the packed-out jobs
other nodes (``planner.core._decode``, :func:`planner.build.widen`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from planner.menu import START, STAY
from planner.problem import Problem
from planner.snapshot import MILLI_PER_GPU, Job, Node


@dataclass
class _Devices:
    """One node's devices: ``whole`` devices held whole (counted), ``load`` milli per device shared."""

    gpus: int
    whole: int = 0
    load: list[int] = field(default_factory=list)

    def shared(self) -> int:
        return sum(1 for x in self.load if x > 0)

    def free_whole(self) -> int:
        return self.gpus - self.whole - self.shared()

    def free_milli(self) -> int:
        return max(self.gpus * MILLI_PER_GPU - self.whole * MILLI_PER_GPU - sum(self.load), 0)

    def device_for(self, milli: int) -> int | None:
        return best_fit(self.load, milli, self.free_whole())


def best_fit(load: Sequence[int], milli: int, whole_free: int) -> int | None:
    """The device a new fraction of ``milli`` goes to, given the milli-GPUs each device's fractions
    use (``load``) and how many devices nobody uses (``whole_free``): the shared device with the least
    room that still holds it (ties: lowest index), else the lowest-numbered free device; ``None``:
    none. The planner's packing and every baseline's ledger use this one rule."""
    fits = [(-x, d) for d, x in enumerate(load) if 0 < x and x + milli <= MILLI_PER_GPU]
    if fits:
        return min(fits)[1]
    if whole_free > 0:
        return next((d for d, x in enumerate(load) if x == 0), None)
    return None


@dataclass(frozen=True)
class Packing:
    """The choice after packing, each placed fractional job's device, and why a job lost its place."""

    choice: np.ndarray
    device: dict[int, int]
    why: dict[int, str]
    #: Per node after packing: (devices no job uses, milli-GPUs used on each device by fractional
    #: jobs). Empty when no job is fractional (nothing was packed).
    devices: tuple[tuple[int, tuple[int, ...]], ...] = ()


def _gpus(problem: Problem, j: int, option: int) -> int:
    """Whole GPUs ``option`` takes on its node (a gang: its rank 0's replicas there)."""
    m = problem.menus[j]
    if m.count is not None:
        return int(problem.dem_gpu[option]) * m.gpu_unit // MILLI_PER_GPU
    return int(m.gpu[int(problem.opt_level[option])]) * m.outlook.job.replicas


def _stays(job: Job, node: Node) -> bool:
    return job.status == "running" and job.node == node.name


def _reason(job: Job, gpus: int, node: Node, dev: _Devices) -> str:
    free = f"{dev.free_milli() / MILLI_PER_GPU:g} GPU free there in total"
    if job.gpu_milli is not None:
        return (
            f"needs {job.gpu_milli / MILLI_PER_GPU:g} GPU on {node.name}: {free} but no single device has "
            f"{job.gpu_milli} milli free (GPU fragmentation)"
        )
    return (
        f"needs {gpus} whole GPU(s) on {node.name}: {free} but only {max(dev.free_whole(), 0)} device(s) no fractional job shares"
    )


def pack_devices(problem: Problem, choice: np.ndarray, nodes: Sequence[Node], retry: Mapping[int, str] | None = None) -> Packing:
    """Number the GPU devices of ``choice`` (see the module docstring); ``nodes`` are the problem's, in order.

    ``retry``: jobs an earlier packing left waiting, with why (job index -> reason), now waiting in
    ``choice`` of a problem that offers them more nodes (:func:`planner.build.widen`): each start
    that fits a device there and lowers the objective is taken; the others keep their reason."""
    choice = choice.copy()
    menus = problem.menus
    if not any(m.outlook.job.gpu_milli is not None for m in menus):
        return Packing(choice, {}, {})
    devs = [_Devices(gpus=n.gpus, load=[0] * n.gpus) for n in nodes]
    device: dict[int, int] = {}
    whole_new: list[int] = []
    frac_new: list[int] = []
    for e in np.flatnonzero(np.isin(problem.ext_opt, choice)).tolist():
        # A gang's replicas off its own node hold whole GPUs there (gangs are never fractional).
        devs[int(problem.ext_node[e])].whole += int(problem.ext_gpu[e]) * menus[0].gpu_unit // MILLI_PER_GPU
    for j in range(problem.n_jobs):
        n = int(problem.opt_node[choice[j]])
        if n < 0:
            continue
        job = menus[j].outlook.job
        held = job.allocation.gpu_device if job.allocation is not None and _stays(job, nodes[n]) else None
        if job.gpu_milli is not None and held is not None and held < nodes[n].gpus:
            devs[n].load[held] += job.gpu_milli
            device[j] = held
        elif job.gpu_milli is None and _stays(job, nodes[n]):
            devs[n].whole += _gpus(problem, j, int(choice[j]))
        elif job.gpu_milli is None:
            if _gpus(problem, j, int(choice[j])) > 0:
                whole_new.append(j)
        else:
            frac_new.append(j)

    def fit(j: int, n: int, option: int) -> bool:
        """Give job ``j`` devices on node ``n`` for ``option`` if they are free (True: done)."""
        job = menus[j].outlook.job
        if job.gpu_milli is None:
            g = _gpus(problem, j, option)
            if g > devs[n].free_whole():
                return False
            devs[n].whole += g
            return True
        d = devs[n].device_for(job.gpu_milli)
        if d is None:
            return False
        devs[n].load[d] += job.gpu_milli
        device[j] = d
        return True

    failed: list[int] = []
    whole_new.sort(key=lambda j: (-_gpus(problem, j, int(choice[j])), j))
    frac_new.sort(key=lambda j: (-(menus[j].outlook.job.gpu_milli or 0), j))
    for j in whole_new + frac_new:
        if not fit(j, int(problem.opt_node[choice[j]]), int(choice[j])):
            failed.append(j)
    why: dict[int, str] = {}
    for j in failed:
        n = int(problem.opt_node[choice[j]])
        job = menus[j].outlook.job
        why_text = _reason(job, _gpus(problem, j, int(choice[j])), nodes[n], devs[n])
        opts = np.array(problem.options_of(j), dtype=np.int64)
        wait = opts[problem.opt_node[opts] < 0]
        if wait.size == 0:
            continue  # a job that cannot leave its node keeps it; the checker judges the plan
        choice[j] = int(wait[0])
        room = problem.capacity() - problem.usage(choice)
        # Other nodes only, and never back onto its own node (a stay keeps a device, which is step 1's).
        others = opts[(problem.opt_node[opts] >= 0) & (problem.opt_node[opts] != n) & (problem.opt_way[opts] != STAY)]
        others = others[~np.isin(others, problem.ext_opt)]  # a spread gang's room is not one node's
        order = others[np.lexsort((others, problem.cost[others]))]
        for o in order.tolist():
            on = int(problem.opt_node[o])
            need = (problem.dem_cpu[o], problem.dem_gpu[o], problem.dem_mem[o])
            if all(need[r] <= room[r, on] for r in range(3)) and fit(j, on, o):
                choice[j] = o
                break
        else:
            if not _stay_put(problem, choice, j, room, devs, device, nodes):
                why[j] = why_text
    if retry:
        _fill(problem, choice, set(why), fit, among=set(retry))
        why.update({j: r for j, r in retry.items() if problem.opt_node[choice[j]] < 0})
    if why:
        _unpause(problem, choice, devs, device, nodes)
        _fill(problem, choice, set(why), fit)
    return Packing(choice, device, why, tuple((max(d.free_whole(), 0), tuple(d.load)) for d in devs))


def _room_held(d: _Devices, job: Job, whole: int) -> bool:
    """Whether a running job's own device (a fraction: the ``gpu_device`` it holds) or ``whole`` free
    devices are still there for it on its node's devices ``d``."""
    assert job.allocation is not None
    if job.gpu_milli is None:
        return whole <= d.free_whole()
    held = job.allocation.gpu_device
    if held is None or held >= d.gpus:
        return False
    return d.load[held] + job.gpu_milli <= MILLI_PER_GPU and (d.load[held] > 0 or d.free_whole() >= 1)


def _unpause(
    problem: Problem,
    choice: np.ndarray,
    devs: list[_Devices],
    device: dict[int, int],
    nodes: Sequence[Node],
) -> None:
    """Running jobs the solver paused go back where they run, on the devices they hold, where that
    room is still free after the packing and staying lowers the objective (cheapest stay first, ties
    by option index). The pool the solver sees can pause a job to make room for a newcomer that no
    device then takes: the pause bought nothing, and the next interval would start the job again
    and pause it again (found replaying the Alibaba trace with GPU models: one pod paused and
    restarted at every event for minutes, 56 idle waits). Gangs are left as the solver chose."""
    menus = problem.menus
    where = {nd.name: k for k, nd in enumerate(nodes)}
    cand: list[tuple[int, int, int, int]] = []
    for j in range(problem.n_jobs):
        job = menus[j].outlook.job
        if problem.opt_node[choice[j]] >= 0 or job.status != "running" or job.allocation is None or menus[j].count is not None:
            continue
        own = where.get(job.node) if job.node is not None else None
        if own is None:
            continue
        for o in problem.options_of(j):
            if problem.opt_node[o] == own and problem.opt_way[o] == STAY:
                cand.append((int(problem.cost[o]) - int(problem.cost[choice[j]]), o, j, own))
    if not cand:
        return
    room = problem.capacity() - problem.usage(choice)
    best = problem.objective(choice)
    for _, o, j, own in sorted(cand):
        job = menus[j].outlook.job
        assert job.allocation is not None
        need = np.array([problem.dem_cpu[o], problem.dem_gpu[o], problem.dem_mem[o]], dtype=np.int64)
        if problem.opt_node[choice[j]] >= 0 or (need > room[:, own]).any():
            continue
        d, held = devs[own], job.allocation.gpu_device
        if not _room_held(d, job, _gpus(problem, j, o)):
            continue
        was = int(choice[j])
        choice[j] = o
        got = problem.objective(choice)
        if got >= best:
            choice[j] = was
            continue
        best = got
        room[:, own] -= need
        if job.gpu_milli is not None:
            assert held is not None
            d.load[held] += job.gpu_milli
            device[j] = held
        else:
            d.whole += _gpus(problem, j, o)


def _stay_put(
    problem: Problem,
    choice: np.ndarray,
    j: int,
    room: np.ndarray,
    devs: list[_Devices],
    device: dict[int, int],
    nodes: Sequence[Node],
) -> bool:
    """A running job whose move packs nowhere stays where it runs, on the device it holds, if that room
    is still there (its stay option closest to what it holds, cheapest first): a move the devices
    cannot take is no reason to pause a job that was running. True: it stays."""
    job = problem.menus[j].outlook.job
    if job.status != "running" or job.node is None or job.allocation is None:
        return False
    own = next((k for k, nd in enumerate(nodes) if nd.name == job.node), None)
    if own is None:
        return False
    held = job.allocation.gpu_device
    d = devs[own]
    if not _room_held(d, job, job.allocation.gpus * job.replicas):
        return False
    opts = np.array(problem.options_of(j), dtype=np.int64)
    stays = opts[(problem.opt_node[opts] == own) & (problem.opt_way[opts] == STAY)]
    for o in stays[np.lexsort((stays, problem.cost[stays]))].tolist():
        need = (problem.dem_cpu[o], problem.dem_gpu[o], problem.dem_mem[o])
        if all(need[r] <= room[r, own] for r in range(3)):
            choice[j] = o
            if job.gpu_milli is not None:
                assert held is not None
                d.load[held] += job.gpu_milli
                device[j] = held
            else:
                d.whole += job.allocation.gpus * job.replicas
            return True
    return False


def _fill(
    problem: Problem,
    choice: np.ndarray,
    packed_out: set[int],
    fit: Callable[[int, int, int], bool],
    among: set[int] | None = None,
) -> None:
    """Hand the room the packed-out jobs leave to pending jobs the solver left waiting (``among``
    them, if given): each start option (largest objective gain first, ties by option index) that
    fits the pool and a device and lowers the objective is taken. Only runs when a job was packed
    out, so plans without fragmentation are exactly the solver's."""
    menus = problem.menus
    waiting = [
        j
        for j in (sorted(among) if among is not None else range(problem.n_jobs))
        if problem.opt_node[choice[j]] < 0 and j not in packed_out and menus[j].outlook.job.status == "pending"
    ]
    cand = [
        (int(problem.cost[o]) - int(problem.cost[choice[j]]), o, j)
        for j in waiting
        for o in problem.options_of(j)
        if problem.opt_node[o] >= 0 and problem.opt_way[o] == START and menus[j].count is None
    ]
    if not cand:
        return
    room = problem.capacity() - problem.usage(choice)
    best = problem.objective(choice)
    for _, o, j in sorted(cand):
        n = int(problem.opt_node[o])
        need = np.array([problem.dem_cpu[o], problem.dem_gpu[o], problem.dem_mem[o]], dtype=np.int64)
        if problem.opt_node[choice[j]] >= 0 or (need > room[:, n]).any():
            continue
        was = int(choice[j])
        choice[j] = o
        got = problem.objective(choice)
        if got >= best or not fit(j, n, o):
            choice[j] = was
            continue
        best = got
        room[:, n] -= need
