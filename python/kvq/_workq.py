"""The work queue: leases, acks, nacks, delays, dedup and dead letters (private module)."""

from __future__ import annotations

import ctypes
import time
from ctypes import byref, c_uint64, c_void_p
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Union

from . import _handle
from . import _lib
from ._db import Database, Transaction, _name
from ._handle import Handle, as_bytes, as_int, as_ms, check, error, lib, read, take
from .errors import ClosedError, NotFoundError

_ENOTFOUND = 9003
_TOKEN_LEN = 88
_DAY_MS = 86_400_000


@dataclass(frozen=True)
class DeadLetter:
    """An item that had its deliveries: its value and how many times it was delivered."""

    value: bytes
    deliveries: int


@dataclass(frozen=True)
class WorkItem:
    """An in-flight or delayed item as the listings give it.

    Attributes:
        value: the item's bytes.
        deliveries: deliveries so far (in flight: this one included).
        priority: the item's priority (priority queues; 0 otherwise).
        due: seconds until its lease ends (in flight) or it falls due (delayed).
        token: in flight, the lease token (WorkQueue.ack accepts it); None when delayed.
    """

    value: bytes
    deliveries: int
    priority: int
    due: float
    token: Optional[str]


@dataclass(frozen=True)
class WorkQueueStats:
    """Counts of a work queue (kvq_workq_stats); totals count this API's operations only.

    oldest_ready_age is in seconds, None when nothing is ready.
    """

    ready: int
    inflight: int
    delayed: int
    dead: int
    oldest_ready_age: Optional[float]
    received: int
    taken: int
    acked: int
    requeued: int
    dead_lettered: int
    cleared: int
    cleared_ready: int


def _format(lease: _lib.kvq_workq_lease) -> str:
    out = ctypes.create_string_buffer(_TOKEN_LEN + 1)
    n = ctypes.c_size_t(0)
    check(lib().kvq_workq_lease_format(out, len(out), byref(n), byref(lease)))
    return out.raw[: n.value].decode("ascii")


class Message:
    """A received item and its lease. A context manager: ``with wq.receive() as msg:`` acks
    the item when the block ends normally and nacks it (gives it back after ``nack_delay``
    seconds, 0 by default) when the block raises; an item settled inside the block is left
    alone.

    Attributes:
        value: the item's bytes.
        deliveries: this is the item's deliveries-th delivery (1 for the first).
        priority: the item's priority (priority queues; 0 otherwise).
        token: the lease as text, as ``kvq receive`` prints it (``kvq ack QUEUE TOKEN``).
        settled: True once acked or nacked through this object.
    """

    def __init__(self, wq: "WorkQueue", value: bytes, lease: _lib.kvq_workq_lease,
                 nack_delay: float = 0.0) -> None:
        self.wq = wq
        self.value = value
        self._lease = lease
        self.deliveries: int = int(lease.deliveries)
        self.priority: int = int(lease.priority)
        self.settled = False
        self.nack_delay = nack_delay

    @property
    def token(self) -> str:
        """The lease token (88 hexadecimal digits)."""
        return _format(self._lease)

    def ack(self, *, tr: Optional[Transaction] = None) -> None:
        """Acknowledges: the item is deleted. With tr, the ack commits with the caller's writes.

        Raises:
            LeaseExpiredError: the lease ended first; the item was or will be delivered again.
            LeaseSettledError: already acked or nacked.
        """
        self.wq.ack(self, tr=tr)

    def nack(self, delay: float = 0.0, *, tr: Optional[Transaction] = None) -> None:
        """Gives the item back, ready again after delay seconds (or to the dead letters once it
        had the queue's max deliveries)."""
        self.wq.nack(self, delay=delay, tr=tr)

    def extend(self, lease: Optional[float] = None, *, tr: Optional[Transaction] = None) -> None:
        """Moves the lease's end to lease seconds from now (None: the queue's default lease)."""
        self.wq.extend(self, lease=lease, tr=tr)

    def __enter__(self) -> "Message":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.settled:
            return
        if exc_type is None:
            self.ack()
            return
        try:
            self.nack(self.nack_delay)
        except Exception:
            pass  # the lease ended, or the database is gone: the item comes back all the same

    def __repr__(self) -> str:
        return f"<kvq.Message {self.value[:32]!r} deliveries={self.deliveries}>"


LeaseLike = Union[Message, str]


class WorkQueue(Handle):
    """A named durable or priority queue with work-queue semantics, shared by threads.

    Opened with Database.work_queue. A received item is leased, not removed: it is deleted by
    an ack, given back by a nack, and comes back by itself when its lease ends (its consumer
    died). Times are in seconds of database time (read versions), never the client's clock.
    """

    _kind = "work queue"

    def __init__(self, db: Database, name: str, *, lease: Optional[float] = None,
                 max_deliveries: Optional[int] = None,
                 dedup_window: Optional[float] = None) -> None:
        super().__init__()
        if not isinstance(db, Database):
            raise TypeError(f"db must be a kvq.Database, not {type(db).__name__}")
        n = _name(name)
        self.db = db
        self.name = name
        L = lib()
        opts = None
        if lease is not None or max_deliveries is not None or dedup_window is not None:
            info = db.queue_info(name)
            opts = _lib.kvq_workq_options(2, 30000, 5, 300000)
            if info.lease:
                opts.lease_ms = int(round(info.lease * 1000))
            opts.max_deliveries = info.max_deliveries
            if lease is not None:
                opts.lease_ms = as_ms(lease, "lease")
            if max_deliveries is not None:
                opts.max_deliveries = as_int(max_deliveries, "max_deliveries")
            if dedup_window is not None:
                opts.dedup_window_ms = as_ms(dedup_window, "dedup_window")
        q = c_void_p()
        w = c_void_p()
        with db._use() as dp:
            check(L.kvq_queue_open_named(byref(q), None, dp, n))
            rc = L.kvq_workq_open(byref(w), q.value, byref(opts) if opts is not None else None)
            if rc:
                e = error(rc)
                L.kvq_queue_close(q.value)
                raise e
            self._q = q.value
            self._opened(w.value)
            db._children.add(self)

    def _free(self, ptr: int) -> None:
        lib().kvq_workq_close(ptr)
        lib().kvq_queue_close(self._q)

    def __enter__(self) -> "WorkQueue":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<kvq.WorkQueue {self.name!r}{' closed' if self.closed else ''}>"

    def _tr(self, tr: Any) -> int:
        if not isinstance(tr, Transaction):
            raise TypeError(f"tr must be a kvq.Transaction, not {type(tr).__name__}")
        if tr.db is not self.db:
            raise ValueError("tr belongs to another database handle")
        return tr._p()

    def _lease(self, m: Any) -> _lib.kvq_workq_lease:
        if isinstance(m, Message):
            return m._lease
        if isinstance(m, str):
            lease = _lib.kvq_workq_lease()
            check(lib().kvq_workq_lease_parse(byref(lease), m.encode("ascii", "replace")))
            return lease
        raise TypeError(f"expected a kvq.Message or a lease token (str), not {type(m).__name__}")

    # --- pushes ----------------------------------------------------------------------------
    def push(self, value: Any, *, priority: int = 0, delay: Optional[float] = None,
             not_before: Optional[int] = None, dedup: Any = None,
             tr: Optional[Transaction] = None) -> bool:
        """Pushes a value, exactly once.

        Args:
            priority: priority queues only (lower is received first).
            delay: seconds of database time before the item can be received.
            not_before: or a read version before which it stays invisible.
            dedup: a key (bytes or str, 1 to 1,000 bytes): a push of a key already pushed
                within the dedup window enqueues nothing.

        Returns:
            True when the item was enqueued, False when its dedup key had been pushed.
        """
        v = as_bytes(value)
        po = _lib.kvq_workq_push_options(1, as_int(priority, "priority"), 0, 0, None, 0)
        if delay is not None:
            po.delay_ms = as_ms(delay, "delay")
        if not_before is not None:
            po.not_before = as_int(not_before, "not_before")
        key = None
        if dedup is not None:
            key = as_bytes(dedup, "dedup")
            po.dedup_key = ctypes.cast(ctypes.c_char_p(key), c_void_p).value
            po.dedup_len = len(key)
        out = ctypes.c_bool(False)
        with self._use() as p:
            if tr is None:
                check(lib().kvq_workq_push(byref(out), p, v, len(v), byref(po)))
            else:
                check(lib().kvq_workq_push_txn(byref(out), p, self._tr(tr), v, len(v), byref(po)))
        del key
        return bool(out.value)

    # --- receiving -------------------------------------------------------------------------
    def receive(self, *, lease: Optional[float] = None, timeout: Optional[float] = None,
                tr: Optional[Transaction] = None, nack_delay: float = 0.0) -> Message:
        """Receives the first ready item with a lease, waiting up to timeout seconds for one.

        Args:
            lease: seconds the item is leased (None: the queue's lease).
            timeout: None waits until an item is ready, 0 looks once. The wait sleeps on kvq's
                watch (no polling) with the GIL released, waking at least every WAIT_SLICE
                seconds to notice a close or a signal.
            tr: receive inside the caller's transaction (looks once; timeout must be None or 0).
            nack_delay: the delay the message's ``with`` block nacks with on an exception.

        Raises:
            NotFoundError: nothing was ready within the timeout.
        """
        lm = 0 if lease is None else as_ms(lease, "lease")
        if lease is not None and lm == 0:
            raise ValueError("lease must be at least a millisecond")
        as_ms(nack_delay, "nack_delay")
        L = lib()
        lz = _lib.kvq_workq_lease()
        if tr is not None:
            if timeout:
                raise ValueError("a receive inside a transaction cannot wait")
            out = _lib.kvq_bytes()
            with self._use() as p:
                check(L.kvq_workq_receive_txn(byref(out), byref(lz), p, self._tr(tr), lm))
            return Message(self, read(out.data, out.len), lz, nack_delay)
        deadline = None
        if timeout is not None:
            deadline = time.monotonic() + as_ms(timeout, "timeout") / 1e3
        while True:
            if deadline is None:
                wait_s = _handle.WAIT_SLICE
            else:
                wait_s = max(0.0, min(_handle.WAIT_SLICE, deadline - time.monotonic()))
            buf = _lib.kvq_buf()
            with self._use() as p:
                rc = L.kvq_workq_receive_wait(byref(buf), byref(lz), p, lm,
                                              min(_DAY_MS, int(wait_s * 1000)))
                if rc == 0:
                    return Message(self, take(buf), lz, nack_delay)
                L.kvq_buf_dispose(byref(buf))
                if rc != _ENOTFOUND:
                    raise error(rc)
            if deadline is not None and time.monotonic() >= deadline:
                raise NotFoundError("nothing ready", f"no item of {self.name} was ready "
                                    f"within {timeout} s")

    def consume(self, *, lease: Optional[float] = None, timeout: Optional[float] = None,
                nack_delay: float = 0.0) -> Iterator[Message]:
        """Yields received messages as items become ready, sleeping while none is.

        Settle each message (``with msg:``, or msg.ack() / msg.nack()); one left unsettled
        comes back when its lease ends. The iteration ends once nothing was ready for timeout
        seconds (None: never).
        """
        while True:
            try:
                m = self.receive(lease=lease, timeout=timeout, nack_delay=nack_delay)
            except NotFoundError:
                return
            except ClosedError:
                if self._closing:
                    return
                raise
            yield m

    # --- settling --------------------------------------------------------------------------
    def ack(self, msg: LeaseLike, *, tr: Optional[Transaction] = None) -> None:
        """Acknowledges a message (or a lease token): the item is deleted.

        Raises:
            LeaseExpiredError, LeaseSettledError.
        """
        lz = self._lease(msg)
        with self._use() as p:
            if tr is None:
                check(lib().kvq_workq_ack(p, byref(lz)))
            else:
                check(lib().kvq_workq_ack_txn(p, self._tr(tr), byref(lz)))
        if isinstance(msg, Message):
            msg.settled = True

    def nack(self, msg: LeaseLike, delay: float = 0.0, *,
             tr: Optional[Transaction] = None) -> None:
        """Gives an item back, ready again after delay seconds (to the dead letters instead
        once it had the queue's max deliveries)."""
        lz = self._lease(msg)
        d = as_ms(delay, "delay")
        with self._use() as p:
            if tr is None:
                check(lib().kvq_workq_nack(p, byref(lz), d))
            else:
                check(lib().kvq_workq_nack_txn(p, self._tr(tr), byref(lz), d))
        if isinstance(msg, Message):
            msg.settled = True

    def extend(self, msg: LeaseLike, lease: Optional[float] = None, *,
               tr: Optional[Transaction] = None) -> None:
        """Extends a lease that has not ended to lease seconds from now (None: the default)."""
        lz = self._lease(msg)
        lm = 0 if lease is None else as_ms(lease, "lease")
        with self._use() as p:
            if tr is None:
                check(lib().kvq_workq_extend(p, byref(lz), lm))
            else:
                check(lib().kvq_workq_extend_txn(p, self._tr(tr), byref(lz), lm))

    # --- upkeep, dead letters, listings ----------------------------------------------------
    def _count(self, fn_name: str) -> int:
        n = c_uint64(0)
        with self._use() as p:
            check(getattr(lib(), fn_name)(byref(n), p))
        return n.value

    def recover(self) -> int:
        """Returns ended leases and due delayed items to the queue; how many it moved."""
        return self._count("kvq_workq_recover")

    def redrive(self) -> int:
        """Moves every dead letter back to the queue (deliveries reset); how many."""
        return self._count("kvq_workq_dlq_redrive")

    def purge_dead_letters(self) -> int:
        """Deletes every dead letter; how many."""
        return self._count("kvq_workq_dlq_purge")

    def purge(self) -> int:
        """Removes every item whatever its state (ready, in flight, delayed, dead); how many."""
        return self._count("kvq_workq_purge")

    def dead_letters(self) -> List[DeadLetter]:
        """The dead letters, in key order."""
        out: List[DeadLetter] = []

        def each(v: Any, deliveries: int, _payload: Any) -> int:
            out.append(DeadLetter(read(v.data, v.len), int(deliveries)))
            return 0

        cb = _lib.DLQ_FN(each)
        with self._use() as p:
            check(lib().kvq_workq_dlq_list(p, cb, None))
        return out

    def _items(self, fn_name: str, inflight: bool) -> List[WorkItem]:
        out: List[WorkItem] = []

        def each(ip: Any, _payload: Any) -> int:
            it = ip.contents
            out.append(WorkItem(read(it.value.data, it.value.len), int(it.deliveries),
                                int(it.priority), it.due_ms / 1000.0,
                                _format(it.lease) if inflight else None))
            return 0

        cb = _lib.ITEM_FN(each)
        with self._use() as p:
            check(getattr(lib(), fn_name)(p, cb, None))
        return out

    def in_flight(self) -> List[WorkItem]:
        """The leased items, the lease ending soonest first."""
        return self._items("kvq_workq_list_inflight", True)

    def delayed(self) -> List[WorkItem]:
        """The delayed items, the one due soonest first."""
        return self._items("kvq_workq_list_delayed", False)

    def stats(self) -> WorkQueueStats:
        """Ready, in-flight, delayed and dead counts and the totals (read from counters)."""
        m = _lib.kvq_workq_stats()
        with self._use() as p:
            check(lib().kvq_workq_get_stats(byref(m), p))
        age = m.oldest_ready_age_ms
        return WorkQueueStats(m.ready, m.inflight, m.delayed, m.dead,
                                None if age < 0 else age / 1000.0, m.received, m.taken,
                                m.acked, m.requeued, m.dead_lettered, m.cleared, m.cleared_ready)
