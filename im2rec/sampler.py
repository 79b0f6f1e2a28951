"""Which records each rank reads, and in what order: ``RecordSampler``, exact, deterministic, elastic.

The order of an epoch is built in three steps, all drawn from ``(seed, epoch)``:

1. **Blocks.** The dataset is cut into blocks of neighbouring records (a
   ``RecordDataset`` gives its own read blocks, about 4 MB of records each, so that a
   block is one request to a store); the blocks are shuffled.
2. **Ranks.** The shuffled records are padded (``drop_last=False``: by repeating the
   first ones, at most ``num_replicas - 1``) or cut (``drop_last=True``) to a multiple
   of ``num_replicas`` and dealt in equal contiguous pieces: rank ``r`` gets the r-th
   piece. With ``batch_size`` and ``num_workers`` given, a rank's piece is further split
   between its DataLoader workers (the DataLoader hands batch ``k`` to worker ``k % num_workers``),
   so that each worker reads blocks of its own.
3. **Windows.** Within each piece, records are shuffled inside windows of ``window``
   consecutive blocks: a batch mixes records of several blocks, while a worker needs
   only those few blocks at a time.

The epoch's **global order** interleaves the ranks' pieces: position ``p`` belongs to
rank ``p % num_replicas``. Training on ``W`` ranks, ``n`` steps of one sample each
consume exactly the first ``n * W`` positions, so progress is one number,
``consumed``, and a job restarted on ``W'`` ranks resumes by dealing the rest of the
global order (positions ``consumed`` onwards) over its ``W'`` ranks the same way:
every remaining sample is read once, whatever ``W'`` is.

Everything is numpy; torch is needed by neither this module nor the dataset.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sized
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

__all__ = ["RecordSampler"]

_STATE_VERSION = 1
_STREAM = 0x1A2EC  # this module's random streams: default_rng([seed, epoch, _STREAM, ...])


def _distributed() -> tuple[int, int] | None:
    """``(world size, rank)`` from ``torch.distributed`` when it is initialised."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return None


@runtime_checkable
class BlockReads(Protocol):
    """What a dataset may offer beyond ``len()`` (``RecordDataset`` does): its read blocks, the
    positions where each starts, and reading in the order of the sampler it is handed."""

    @property
    def blocks(self) -> np.ndarray: ...

    def follow(self, sampler: Any) -> None: ...


def _block_starts(dataset: Sized, block_size: int | None) -> np.ndarray:
    """Start of each block and ``len(dataset)`` at the end: the dataset's own read blocks
    (``RecordDataset.blocks``) unless ``block_size`` sets a fixed number of records."""
    n = len(dataset)
    if block_size is None and isinstance(dataset, BlockReads):
        return np.asarray(dataset.blocks, dtype=np.int64)
    size = block_size or 64
    return np.append(np.arange(0, n, size, dtype=np.int64), np.int64(n)) if n else np.zeros(1, np.int64)


class RecordSampler:
    """Indices into ``dataset`` for one rank of a (possibly distributed) training job.

    A drop-in for ``torch.utils.data.DistributedSampler`` (``set_epoch``, ``len``), and a
    ``Stateful`` sampler for torchdata's ``StatefulDataLoader``, that needs no torch.

    Args:
        dataset: anything with ``len``; a ``RecordDataset`` also gives its read blocks.
        shuffle: a new order each epoch (False: file order, dealt to ranks the same way).
        seed: the same seed gives the same order in every process.
        num_replicas, rank: the job's size and this process's rank; from
            ``torch.distributed`` when it is initialised, else 1 and 0.
        drop_last: cut the epoch to a multiple of ``num_replicas`` (at most
            ``num_replicas - 1`` samples left out) instead of padding it (at most
            ``num_replicas - 1`` repeated).
        block_local: shuffle blocks of neighbouring records, then records within windows
            of blocks (reads stay local: a store is read in whole blocks). False: one full
            permutation of the records.
        window: how many consecutive blocks' records are mixed together.
        block_size: records per block, overriding the dataset's read blocks (a dataset
            without them gets 64).
        batch_size, num_workers: the DataLoader's, to give each worker blocks of its own
            (optional: without them, a rank's workers share its blocks).

    Every rank yields ``len(sampler)`` indices per epoch; the ranks' indices together
    are every index of the dataset (plus the padding). The order depends only on
    ``(seed, epoch, num_replicas)`` and the dataset's length and blocks.

    ``state_dict()`` says how far the epoch went; ``load_state_dict(state)`` resumes
    there, on any number of ranks. Load it, then ``set_epoch`` the same epoch (or not at
    all) and iterate: the first iteration after loading starts at ``state["consumed"]``.
    """

    def __init__(
        self,
        dataset: Sized,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
        drop_last: bool = False,
        block_local: bool = True,
        window: int = 8,
        block_size: int | None = None,
        batch_size: int | None = None,
        num_workers: int = 0,
    ):
        if num_replicas is None or rank is None:
            world = _distributed()
            if world is None and rank is None and num_replicas not in (None, 1):
                raise ValueError(f"num_replicas={num_replicas} needs rank (or an initialised torch.distributed)")
            world = world or (1, 0)
            num_replicas = world[0] if num_replicas is None else num_replicas
            rank = world[1] if rank is None else rank
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be at least 1, got {num_replicas}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas={num_replicas}), got {rank}")
        for name, value in (("window", window), ("block_size", block_size), ("batch_size", batch_size)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        self.dataset = dataset
        self.seed, self.num_replicas, self.rank = int(seed), num_replicas, rank
        self.order = _Order(shuffle, drop_last, block_local, window, block_size, batch_size, max(0, num_workers))
        if block_local and shuffle and isinstance(dataset, BlockReads):
            dataset.follow(self)  # RecordDataset: from a store, fetch whole blocks, and the next batch's ahead
        self.epoch = 0
        self._blocks: dict[int | None, np.ndarray] = {}
        # The current iteration: it deals `_plan_order` over `_plan_replicas` ranks; the first
        # `_start` positions were consumed before it began, and it shares the rest over
        # `_live_replicas` ranks (num_replicas, but in an elastic resume).
        self._plan_order, self._plan_replicas = self.order, num_replicas
        self._start = self._yielded = self._total = 0
        self._live_replicas = num_replicas
        self._pending: dict[str, Any] | None = None

    @property
    def shuffle(self) -> bool:
        return self.order.shuffle

    @property
    def drop_last(self) -> bool:
        return self.order.drop_last

    # -- the order ----------------------------------------------------------- #

    def blocks(self, block_size: int | None = None) -> np.ndarray:
        """The start of each block of neighbouring records, and ``len(dataset)`` at the end."""
        if block_size not in self._blocks:
            self._blocks[block_size] = _block_starts(self.dataset, block_size)
        return self._blocks[block_size]

    def _pieces(self, epoch: int, replicas: int, order: _Order) -> np.ndarray:
        """``(replicas, per_rank)``: each rank's indices for the epoch, in reading order."""
        records = self._records(epoch, replicas, order)
        return np.stack([self._arranged(records, epoch, replicas, order, r) for r in range(replicas)])

    def _piece(self, epoch: int, replicas: int, order: _Order, rank: int) -> np.ndarray:
        """Rank ``rank``'s row of ``_pieces``, without arranging the others'."""
        return self._arranged(self._records(epoch, replicas, order), epoch, replicas, order, rank)

    def _records(self, epoch: int, replicas: int, order: _Order) -> np.ndarray:
        """``(replicas, per_rank)``: the epoch's records dealt in contiguous pieces, not yet
        arranged within a piece (blocks shuffled, padded or cut)."""
        n = len(self.dataset)
        rng = np.random.default_rng([self.seed, epoch, _STREAM])
        starts = self.blocks(order.block_size)
        if not order.shuffle:
            records = np.arange(n, dtype=np.int64)
        elif not order.block_local:
            records = rng.permutation(n).astype(np.int64)
        else:
            records = _concat_blocks(starts, rng.permutation(starts.size - 1))
        per_rank = _share(n, replicas, order.drop_last)
        records = np.resize(records, per_rank * replicas) if n else np.zeros(0, np.int64)  # pads by repeating from the start
        return records.reshape(replicas, per_rank)

    def _arranged(self, records: np.ndarray, epoch: int, replicas: int, order: _Order, rank: int) -> np.ndarray:
        """Rank ``rank``'s piece in reading order: shuffled within windows of blocks (each rank
        with a random stream of its own, so that a rank computes only its own piece)."""
        piece = records[rank]
        if not (order.shuffle and order.block_local) or piece.size == 0:
            return piece
        block_of = np.searchsorted(self.blocks(order.block_size), piece, side="right") - 1
        return _arrange(piece, block_of, order, np.random.default_rng([self.seed, epoch, _STREAM, replicas, rank]))

    # -- the sampler protocol ------------------------------------------------ #

    def set_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch`` (call it before each epoch, as for DistributedSampler).
        A resume loaded for another epoch is dropped."""
        if self._pending is not None and self._pending["epoch"] != epoch:
            self._pending = None
        if epoch != self.epoch:  # no progress in the new epoch yet
            self._plan_order, self._plan_replicas = self.order, self.num_replicas
            self._start = self._yielded = 0
            self._live_replicas = self.num_replicas
            self._total = _share(len(self.dataset), self.num_replicas, self.drop_last) * self.num_replicas
        self.epoch = int(epoch)

    def _plan(self) -> np.ndarray:
        """The indices this rank yields in the iteration that starts now (a loaded resume is used up)."""
        pending, self._pending = self._pending, None
        indices, self._start, self._total, self._plan_order, self._plan_replicas = self._indices(pending)
        self._yielded, self._live_replicas = 0, self.num_replicas
        return indices

    def _indices(self, pending: dict[str, Any] | None) -> tuple[np.ndarray, int, int, _Order, int]:
        """``(this rank's indices, positions consumed before, positions in all, order, its ranks)``
        of an iteration starting from ``pending`` (a loaded resume) or from the epoch's start."""
        if pending is None:
            mine = self._piece(self.epoch, self.num_replicas, self.order, self.rank)
            return mine, 0, mine.size * self.num_replicas, self.order, self.num_replicas
        order_settings, replicas = _Order(**pending["order"]), pending["num_replicas"]
        order = self._pieces(self.epoch, replicas, order_settings).T.reshape(-1)
        consumed = min(pending["consumed"], order.size)
        if replicas == self.num_replicas and consumed % self.num_replicas == 0:
            return order[consumed + self.rank :: self.num_replicas], consumed, order.size, order_settings, replicas
        rest = order[consumed:]  # elastic: deal what is left over the ranks there are now
        rest = np.resize(rest, _share(rest.size, self.num_replicas, self.drop_last) * self.num_replicas) if rest.size else rest
        return rest[self.rank :: self.num_replicas], consumed, order.size, order_settings, replicas

    @property
    def window(self) -> int:
        """Read blocks each worker holds at once (``RecordDataset`` makes room for them)."""
        return self.order.window

    def upcoming(self) -> np.ndarray:
        """The indices the next iteration will yield on this rank, without starting it: a
        DataLoader worker's copy of the sampler (made when the workers started, after
        ``set_epoch``) tells its ``RecordDataset`` which blocks to fetch ahead."""
        return self._indices(self._pending)[0]

    def __iter__(self) -> Iterator[int]:
        return self._generate(self._plan().tolist())

    def _generate(self, indices: list[int]) -> Iterator[int]:
        for i in indices:
            self._yielded += 1
            yield i

    def __len__(self) -> int:
        """Indices the next iteration yields: the epoch's share of each rank, or what a
        loaded resume leaves this rank."""
        n = len(self.dataset)
        if self._pending is None:
            return _share(n, self.num_replicas, self.drop_last)
        total = _share(n, self._pending["num_replicas"], self._pending["order"]["drop_last"]) * self._pending["num_replicas"]
        return _share(max(0, total - self._pending["consumed"]), self.num_replicas, self.drop_last)

    # -- checkpoints --------------------------------------------------------- #

    def state_dict(self, taken: int | None = None) -> dict[str, Any]:
        """Where the epoch stands: ``epoch``, ``seed``, ``num_replicas`` (the ranks the
        epoch's order was dealt over), ``consumed`` (positions of that order read by all
        ranks together), the order's settings and the dataset's length. A loaded state not
        yet iterated is returned as loaded.

        Args:
            taken: the indices this rank's training loop has taken from the current
                iteration (batches done x batch size). A DataLoader draws indices ahead of
                the loop (its workers' prefetch), so with a plain DataLoader pass it;
                torchdata's ``StatefulDataLoader`` needs no help (it saves this state as
                of each batch it returns). Default: every index yielded so far.
        """
        if self._pending is not None:
            return {**self._pending, "order": dict(self._pending["order"])}
        if taken is not None and not 0 <= taken <= self._yielded:
            raise ValueError(f"taken={taken}, but this rank has yielded {self._yielded} indices of the current iteration")
        taken = self._yielded if taken is None else int(taken)
        return self._state(self.epoch, self._plan_replicas, min(self._start + taken * self._live_replicas, self._total), self._plan_order)

    def _state(self, epoch: int, replicas: int, consumed: int, order: _Order) -> dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "epoch": epoch,
            "seed": self.seed,
            "num_replicas": replicas,
            "consumed": int(consumed),
            "length": len(self.dataset),
            "blocks": zlib.crc32(self.blocks(order.block_size).tobytes()),
            "order": order._asdict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the epoch of ``state`` where it stopped, on this sampler's ranks.

        ``state`` is what ``state_dict()`` returned (on any rank: they agree), or written
        by hand with at least ``epoch``, ``num_replicas`` and ``consumed`` (the samples all
        ranks together read in that epoch); the order's settings are then this sampler's.

        Raises:
            ValueError: the state is for a dataset of another length or other blocks, or
                another seed.
        """
        missing = [k for k in ("epoch", "num_replicas", "consumed") if k not in state]
        if missing:
            raise ValueError(f"a RecordSampler state needs {', '.join(missing)}")
        n = len(self.dataset)
        if state.get("length", n) != n:
            raise ValueError(f"the state was saved for a dataset of {state['length']} samples; this one has {n}")
        if state.get("seed", self.seed) != self.seed:
            raise ValueError(f"the state was saved with seed {state['seed']}; this sampler has seed {self.seed}")
        order = _Order(**state["order"]) if "order" in state else self.order
        if state.get("blocks") not in (None, zlib.crc32(self.blocks(order.block_size).tobytes())):
            raise ValueError("the state was saved for a dataset with other blocks of records (another file, or other read blocks)")
        replicas, consumed = int(state["num_replicas"]), int(state["consumed"])
        if replicas < 1 or consumed < 0:
            raise ValueError(f"bad RecordSampler state: num_replicas {replicas}, consumed {consumed}")
        self.epoch = int(state["epoch"])
        self._pending = self._state(self.epoch, replicas, consumed, order)

    def __repr__(self) -> str:
        return (
            f"RecordSampler({len(self.dataset)} samples, rank {self.rank} of {self.num_replicas}, "
            f"seed={self.seed}, epoch={self.epoch}, shuffle={self.shuffle}, block_local={self.order.block_local})"
        )


class _Order(NamedTuple):
    """The settings an epoch's order depends on (with the seed, the epoch and the ranks)."""

    shuffle: bool
    drop_last: bool
    block_local: bool
    window: int
    block_size: int | None
    batch_size: int | None
    num_workers: int


def _share(n: int, replicas: int, drop_last: bool) -> int:
    """Each rank's share of ``n`` samples: cut or padded to a multiple of ``replicas``."""
    return n // replicas if drop_last else -(-n // replicas)


def _arrange(piece: np.ndarray, block_of: np.ndarray, order: _Order, rng: np.random.Generator) -> np.ndarray:
    """A rank's piece (``block_of``: each record's block) in reading order: split between its
    workers' batches (when known), each worker's share shuffled within windows of
    ``order.window`` blocks."""
    workers, batch = order.num_workers, order.batch_size
    if workers <= 1 or batch is None:
        return _window_shuffle(piece, block_of, order.window, rng)
    owner = (np.arange(piece.size) // batch) % workers  # the DataLoader's round robin
    out = np.empty_like(piece)
    taken = 0
    for w in range(workers):
        slots = np.flatnonzero(owner == w)
        share = slice(taken, taken + slots.size)
        out[slots] = _window_shuffle(piece[share], block_of[share], order.window, rng)
        taken += slots.size
    return out


def _concat_blocks(starts: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """The records of ``blocks`` (block numbers), block after block."""
    lengths = starts[blocks + 1] - starts[blocks]
    first = np.repeat(starts[blocks] - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return first + np.arange(int(lengths.sum()), dtype=np.int64)


def _window_shuffle(piece: np.ndarray, block_of: np.ndarray, window: int, rng: np.random.Generator) -> np.ndarray:
    """``piece`` with its records shuffled within each run of ``window`` consecutive blocks
    (``block_of``: each record's block)."""
    if piece.size == 0:
        return piece.copy()
    new_block = np.concatenate(([True], block_of[1:] != block_of[:-1]))
    group = (np.cumsum(new_block) - 1) // window
    return piece[np.argsort(group + rng.random(piece.size), kind="stable")]  # the group, then a random place in it
