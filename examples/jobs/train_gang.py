"""A data-parallel training job over plain TCP: softmax regression on digits, gradients summed by an all-reduce.

The replicas find each other with torchrun's variables (the Docker adapter sets them, ``docs/docker.md``):
``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK`` (unset: one replica, alone), or with
TensorFlow's ``TF_CONFIG`` (the adapter's ``flowplan.rendezvous=tensorflow``; :func:`rendezvous`). Rank 0 listens
on ``MASTER_PORT``; every other rank connects, says its rank and the world size it was given, and
receives the training state from rank 0 (epoch, weights, momentum), so only rank 0 reads the
checkpoint. Each epoch is one full-batch gradient step:

- every rank computes, on its shard of the training set (rows ``rank, rank + W, rank + 2W, ...``), the
  gradient of the cross-entropy *summed* over its rows, plus its loss sum and correct count;
- rank 0 adds the vectors of all ranks (reduce) and sends the sum back (broadcast): every rank then
  holds the gradient of the whole training set and takes the same step.

So the trajectory is that of one process on the whole set, whatever ``WORLD_SIZE``: only the order
of the floating-point sums differs (relative differences of about 1e-15).

With parameter servers (``TF_CONFIG`` lists ``ps`` tasks: the Docker adapter's ``flowplan.servers.*``)
the reduce moves off rank 0: the vector is cut into one contiguous slice per server, every worker
sends each server its slice, and each server adds the workers' slices (in rank order) and sends the
sum back. A server holds no state of its own (the weights stay with the workers, the checkpoint with
rank 0), so a restart with other servers loses nothing. A container whose task is ``ps`` runs
:func:`serve`: it accepts every worker, sums until rank 0 says stop or done (which it passes on to
the others), and exits 0; 1 when a worker goes away. ``--work`` repeats each
shard's forward pass (the cost of a bigger model): with more replicas each has fewer rows, and an
epoch is faster.

Rank 0 reports through ``flowplan.sdk`` (JSON lines: ``{"epoch": 3, "loss": ..., "metric": ...}``,
where ``loss`` is the training loss over the whole set, from the forward pass that gave the epoch's
gradient, and ``metric`` the held-out accuracy after its step) and hears
it: on ``SIGTERM`` (the Docker adapter's pause, migration and rescale) it finishes the epoch in
progress, writes ``<checkpoint dir>/<job>.gang.npz``, tells the other ranks to stop, and exits 75.
On start it resumes from that file. On ``SIGUSR1`` (the adapter's ``deliver``, when the job's tier 1
is reached) rank 0 writes the weights to ``<checkpoint dir>/<job>.delivered.npz``, prints
``{"event": "delivered"}``, and training goes on. The other ranks exit 75 when told to stop, 0 when training is
done, and 1 when rank 0 goes away. A rank that loses a peer mid-step exits too (rank 0 with 75, so
the job can be started again from its last checkpoint; ``--checkpoint-every`` bounds what is lost).
A port held by another process (host networking shares the host's ports) is tried again until the
rendezvous timeout, then rank 0 exits 75 and a server 1, each with a line naming the port.

numpy and scikit-learn's bundled digits only: no network beyond the rendezvous, no download.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
import time
from collections.abc import Mapping
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import flowplan.sdk  # noqa: E402

#: Message kinds of the wire protocol: a kind byte, a payload length, then float64s (little-endian).
HELLO, STATE, GRAD, SUM, STOP, DONE = 1, 2, 3, 4, 5, 6
_HEADER = struct.Struct("<BQ")
EX_CHECKPOINTED = 75


class PeerLost(Exception):
    """A peer closed its connection or did not answer in time."""


def send(sock: socket.socket, kind: int, values: np.ndarray | None = None) -> None:
    payload = b"" if values is None else np.ascontiguousarray(values, dtype="<f8").tobytes()
    try:
        sock.sendall(_HEADER.pack(kind, len(payload)) + payload)
    except OSError as exc:  # reset or broken pipe: the peer is gone (or was never ours), as for a receive
        raise PeerLost(str(exc)) from exc


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError as exc:
            raise PeerLost(str(exc)) from exc
        if not chunk:
            raise PeerLost("connection closed")
        buf.extend(chunk)
    return bytes(buf)


def receive(sock: socket.socket) -> tuple[int, np.ndarray]:
    kind, size = _HEADER.unpack(_exactly(sock, _HEADER.size))
    return kind, np.frombuffer(_exactly(sock, size), dtype="<f8") if size else np.zeros(0)


def load_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits with a bias column, shuffled once by ``seed``; a quarter held out."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = np.hstack([x / 16.0, np.ones((len(x), 1))])
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_val = len(x) // 4
    return x[n_val:], y[n_val:], x[:n_val], y[:n_val]


def shard_sums(w: np.ndarray, x: np.ndarray, y: np.ndarray, work: int) -> np.ndarray:
    """The gradient of the cross-entropy summed over ``x``'s rows, then the loss sum and correct count."""
    for _ in range(max(1, work)):
        z = x @ w
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = -np.log(p[rows, y] + 1e-300).sum()
    correct = float((p.argmax(axis=1) == y).sum())
    p[rows, y] -= 1.0
    return np.concatenate([(x.T @ p).ravel(), [loss, correct]])


class Group:
    """This rank's connections: rank 0 holds one socket per other rank, the others one to rank 0."""

    def __init__(self, rank: int, world: int, addr: str, port: int, timeout: float) -> None:
        self.rank, self.world = rank, world
        self.peers: list[socket.socket] = []
        self.servers: Servers | None = None
        if world == 1:
            return
        deadline = time.monotonic() + timeout
        if rank == 0:
            server = _listen(port, world, deadline, "rank 0")
            by_rank: dict[int, socket.socket] = {}
            while len(by_rank) < world - 1:
                server.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    raise PeerLost(f"only {len(by_rank) + 1} of {world} ranks joined within {timeout:g} s") from None
                conn.settimeout(timeout)
                kind, hello = receive(conn)
                r, w = int(hello[0]), int(hello[1])
                if kind != HELLO or w != world or not 0 < r < world or r in by_rank:
                    conn.close()
                    raise SystemExit(
                        f"rendezvous: rank {r} of world {w} does not fit world {world} (ranks seen {sorted(by_rank)})"
                    )
                by_rank[r] = conn
            server.close()
            self.peers = [by_rank[r] for r in sorted(by_rank)]
        else:
            conn = _connect(addr, port, deadline, "rank 0")
            conn.settimeout(timeout)
            send(conn, HELLO, np.array([rank, world], dtype=float))
            self.peers = [conn]

    def all_reduce(self, values: np.ndarray) -> np.ndarray:
        """The sum of every rank's ``values`` (rank 0 adds them in rank order and sends the sum back;
        with parameter servers, each server its slice)."""
        if self.servers is not None:
            return self.servers.reduce(values)
        if self.world == 1:
            return values
        if self.rank != 0:
            send(self.peers[0], GRAD, values)
            kind, total = receive(self.peers[0])
            if kind == STOP:
                raise SystemExit(EX_CHECKPOINTED)
            if kind != SUM:
                raise PeerLost(f"expected a sum, got message kind {kind}")
            return total
        total = values.copy()
        for peer in self.peers:
            kind, got = receive(peer)
            if kind != GRAD or got.shape != values.shape:
                raise PeerLost(f"expected a gradient of {values.size} values, got kind {kind} with {got.size}")
            total += got
        for peer in self.peers:
            send(peer, SUM, total)
        return total

    def tell(self, kind: int, values: np.ndarray | None = None) -> None:
        """Rank 0: send every other rank one message (errors ignored: a rank that is gone is gone)."""
        for peer in self.peers + (self.servers.socks if self.servers is not None and kind in (STOP, DONE) else []):
            try:
                send(peer, kind, values)
            except PeerLost:
                pass

    def close(self) -> None:
        for peer in self.peers + (self.servers.socks if self.servers is not None else []):
            peer.close()


def _listen(port: int, backlog: int, deadline: float, what: str) -> socket.socket:
    """A socket listening on ``port`` (all addresses). A port another process holds (host networking
    shares the host's ports) is tried again until ``deadline``, then PeerLost naming it."""
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
            sock.listen(backlog)
            return sock
        except OSError as exc:
            sock.close()
            if time.monotonic() > deadline:
                raise PeerLost(f"{what} cannot listen on port {port}: {exc.strerror} (held by another process?)") from None
            time.sleep(0.5)


def _connect(addr: str, port: int, deadline: float, what: str) -> socket.socket:
    """A connection to ``what`` at ``addr:port``, tried again until ``deadline`` (it may not listen yet)."""
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            if conn.getsockname() == conn.getpeername():
                # Nothing listens yet and the kernel gave this socket the port itself as its source
                # (possible when the port is in the ephemeral range): TCP connects it to itself.
                conn.close()
                raise OSError("connected to itself")
            return conn
        except OSError:
            if time.monotonic() > deadline:
                raise PeerLost(f"{what} at {addr}:{port} did not answer in time") from None
            time.sleep(0.2)


class Servers:
    """A worker's connections to the parameter servers: one socket each, in server order."""

    def __init__(self, rank: int, world: int, servers: list[tuple[str, int]], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.socks: list[socket.socket] = []
        for i, (addr, port) in enumerate(servers):
            conn = _connect(addr, port, deadline, f"parameter server {i}")
            conn.settimeout(timeout)
            send(conn, HELLO, np.array([rank, world, len(servers)], dtype=float))
            self.socks.append(conn)

    def reduce(self, values: np.ndarray) -> np.ndarray:
        """Each server's slice of ``values`` sent to it; the sums it sends back, joined."""
        parts = np.array_split(values, len(self.socks))
        for sock, part in zip(self.socks, parts, strict=True):
            send(sock, GRAD, part)
        out = []
        for sock, part in zip(self.socks, parts, strict=True):
            kind, total = receive(sock)
            if kind == STOP:
                raise SystemExit(EX_CHECKPOINTED)
            if kind != SUM or total.shape != part.shape:
                raise PeerLost(f"expected a sum of {part.size} values from a parameter server, got kind {kind}")
            out.append(total)
        return np.concatenate(out)


def serve(index: int, servers: int, world: int, port: int, timeout: float) -> int:
    """Parameter server ``index`` of ``servers``: accept the ``world`` workers on ``port``, then, step
    after step, add their slices in rank order and send each the sum; rank 0's stop or done is passed
    on to every worker and ends it (exit 0); a worker gone, or a port it cannot listen on, is exit 1."""
    deadline = time.monotonic() + timeout
    try:
        listener = _listen(port, world, deadline, f"ps {index}")
    except PeerLost as exc:
        print(exc, file=sys.stderr, flush=True)
        return 1
    by_rank: dict[int, socket.socket] = {}
    try:
        while len(by_rank) < world:
            listener.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                print(f"ps {index}: only {len(by_rank)} of {world} workers came within {timeout:g} s", file=sys.stderr)
                return 1
            kind, hello = receive(conn)
            r, w, n = (int(v) for v in hello[:3])
            if kind != HELLO or w != world or n != servers or not 0 <= r < world or r in by_rank:
                print(f"ps {index}: worker {r} of world {w} with {n} servers does not fit", file=sys.stderr)
                return 1
            conn.settimeout(None)  # a step waits for the slowest worker, however long
            by_rank[r] = conn
        workers = [by_rank[r] for r in range(world)]
        print(f"ps {index} of {servers}: serving {world} workers on port {port}", file=sys.stderr, flush=True)
        while True:
            total: np.ndarray | None = None
            for conn in workers:
                kind, got = receive(conn)
                if kind in (STOP, DONE):
                    for other in workers:
                        try:
                            send(other, kind)
                        except PeerLost:
                            pass
                    return 0
                total = got.copy() if total is None else total + got
            for conn in workers:
                send(conn, SUM, total)
    except PeerLost as exc:
        print(f"ps {index}: a worker was lost: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        listener.close()
        for conn in by_rank.values():
            conn.close()


def ps_tasks(env: Mapping[str, str]) -> tuple[list[tuple[str, int]], int | None]:
    """The parameter servers ``TF_CONFIG`` lists (``(host, port)`` each, in order) and this container's
    index among them (None: it is a worker); none without ``TF_CONFIG``."""
    if "MASTER_ADDR" in env or "TF_CONFIG" not in env:
        return [], None
    try:
        tf = json.loads(env["TF_CONFIG"])
        servers = [(h, int(p)) for h, _, p in (str(a).rpartition(":") for a in tf["cluster"].get("ps", []))]
        task = tf["task"]
        index = int(task["index"]) if task["type"] == "ps" else None
    except (KeyError, ValueError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"TF_CONFIG: {exc!r}") from None
    if index is not None and not 0 <= index < len(servers):
        raise ValueError(f"TF_CONFIG: task parameter server {index}, but {len(servers)} listed")
    return servers, index


def rendezvous(env: Mapping[str, str]) -> tuple[int, int, str, int]:
    """``(world size, rank, rank 0's address, its port)``: from torchrun's variables, or, without
    ``MASTER_ADDR``, from TensorFlow's ``TF_CONFIG`` (the Docker adapter's ``flowplan.rendezvous=
    tensorflow``: rank = the worker's index, rank 0 = worker 0, whose ``host:port`` it listens on; the
    other workers' ports go unused by this all-reduce). Raises ValueError on a malformed one."""
    if "MASTER_ADDR" not in env and "TF_CONFIG" in env:
        try:
            tf = json.loads(env["TF_CONFIG"])
            workers, task = list(tf["cluster"]["worker"]), tf["task"]
            host, _, port = str(workers[0]).rpartition(":")
            if task["type"] not in ("worker", "ps"):
                raise ValueError(f"task type {task['type']!r}: only workers and parameter servers are run here")
            return len(workers), int(task["index"]) if task["type"] == "worker" else 0, host, int(port)
        except (KeyError, IndexError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"TF_CONFIG: {exc!r}") from None
    return (
        int(env.get("WORLD_SIZE", "1")),
        int(env.get("RANK", "0")),
        env.get("MASTER_ADDR", "127.0.0.1"),
        int(env.get("MASTER_PORT", "29500")),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default=os.environ.get("FLOWPLAN_JOB", "gang"))
    ap.add_argument("--checkpoint-dir", default=os.environ.get("FLOWPLAN_CHECKPOINT_DIR", "/ckpt"))
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--lr", type=float, default=0.5, help="step on the mean gradient")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--work", type=int, default=100, help="forward passes per shard and epoch (a bigger model's cost)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--checkpoint-every", type=int, default=10, help="epochs between checkpoints kept while training (0: only when asked)"
    )
    ap.add_argument("--rendezvous-timeout", type=float, default=120.0)
    args = ap.parse_args(argv)

    try:
        world, rank, addr, port = rendezvous(os.environ)
        servers, ps_index = ps_tasks(os.environ)
    except ValueError as exc:
        print(f"bad rendezvous: {exc}", file=sys.stderr)
        return 2
    if ps_index is not None:
        return serve(ps_index, len(servers), world, servers[ps_index][1], args.rendezvous_timeout)
    if not 0 <= rank < world:
        print(f"RANK {rank} is outside WORLD_SIZE {world}", file=sys.stderr)
        return 2

    x_tr, y_tr, x_va, y_va = load_data(args.seed)
    n_total = len(x_tr)
    shard = (x_tr[rank::world], y_tr[rank::world])
    ckpt_dir = Path(args.checkpoint_dir)
    ckpt = ckpt_dir / f"{args.job}.gang.npz"

    run = None
    state = np.concatenate([[0.0], np.zeros(2 * x_tr.shape[1] * 10)])  # epoch, weights, momentum
    if rank == 0:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        resumed = None
        if ckpt.exists():
            with np.load(ckpt, allow_pickle=False) as z:
                state = z["state"].copy()
            resumed = int(state[0])
        run = flowplan.sdk.init(
            args.job,
            max_epochs=args.epochs,
            schedule={"kind": "constant"},
            control_dir=os.environ.get("FLOWPLAN_CONTROL_DIR") or ckpt_dir,
            resumed_from=resumed,
        )
        run.event("rendezvous", world_size=world, master=f"{addr}:{port}", servers=len(servers))
    try:
        group = Group(rank, world, addr, port, args.rendezvous_timeout)
        if servers:
            group.servers = Servers(rank, world, servers, args.rendezvous_timeout)
    except PeerLost as exc:
        print(f"rank {rank}: rendezvous failed: {exc}", file=sys.stderr, flush=True)
        return EX_CHECKPOINTED if rank == 0 else 1
    try:
        if rank == 0:
            group.tell(STATE, state)
        else:
            kind, state = receive(group.peers[0])
            if kind != STATE:
                raise PeerLost(f"expected the training state, got message kind {kind}")
            print(f"rank {rank} of {world}: joined at epoch {int(state[0])}", file=sys.stderr, flush=True)
        return train(args, group, run, state, shard, (x_va, y_va), n_total, ckpt)
    except PeerLost as exc:
        print(f"rank {rank}: a peer was lost: {exc}", file=sys.stderr, flush=True)
        if run is not None:
            run.event("peer_lost", error=str(exc)[:200])
            run.finish(stopped=True)
        return EX_CHECKPOINTED if rank == 0 else 1
    finally:
        group.close()


def train(
    args: argparse.Namespace,
    group: Group,
    run: flowplan.sdk.Run | None,
    state: np.ndarray,
    shard: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    n_total: int,
    ckpt: Path,
) -> int:
    size = (len(state) - 1) // 2
    epoch = int(state[0])
    w = state[1 : 1 + size].reshape(-1, 10).copy()
    v = state[1 + size :].reshape(-1, 10).copy()

    def save() -> None:
        tmp = ckpt.with_name(ckpt.name + ".tmp.npz")
        np.savez(tmp, state=np.concatenate([[float(epoch)], w.ravel(), v.ravel()]))
        os.replace(tmp, ckpt)

    while epoch < args.epochs:
        if run is not None and run.should_checkpoint():
            save()
            group.tell(STOP)
            run.checkpoint_done(ckpt, epoch=epoch)  # asked to stop: exits with 75
        total = group.all_reduce(shard_sums(w, *shard, args.work))
        grad, loss, correct = total[:-2].reshape(w.shape) / n_total, total[-2] / n_total, total[-1] / n_total
        v = args.momentum * v - args.lr * grad
        w = w + v
        epoch += 1
        if run is not None:
            z = val[0] @ w
            acc = float((z.argmax(axis=1) == val[1]).mean())
            run.log(epoch, loss=float(loss), metric=acc)
            print(f"epoch {epoch} world {group.world} loss {loss:.12f} train_acc {correct:.4f}", file=sys.stderr, flush=True)
            if run.should_deliver():  # SIGUSR1: rank 0 holds the whole model; training goes on
                delivered = ckpt.with_name(f"{args.job}.delivered.npz")
                np.savez(delivered, w=w)
                run.delivered(delivered, metric=acc)
            if args.checkpoint_every and epoch % args.checkpoint_every == 0:
                save()
    if run is not None:
        group.tell(DONE)
        run.finish()
    elif group.world > 1:
        kind, _ = receive(group.peers[0])  # DONE (or STOP): the last epoch's sum was the last exchange
    return 0


if __name__ == "__main__":
    sys.exit(main())
