"""Named queues: durable, FIFO and priority (private module; exported by kvq)."""

from __future__ import annotations

import time
import ctypes
import itertools
from ctypes import byref, c_int64, c_size_t, c_uint64, c_void_p
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, List, Optional, Tuple

from . import _handle
from . import _lib
from ._db import TYPE_NAMES, SNAPSHOT, Database, Transaction, _name
from ._handle import (Handle, as_bytes, as_int, as_ms, check, error, lib, read, take,
                      thread_buf, thread_buf_ref)
from .errors import ClosedError

_ENOTFOUND = 9003
_ETIMED_OUT = 1004
_MIN, _MAX = 0, 1


@dataclass(frozen=True)
class QueueStats:
    """A queue's length and its handle's counters (kvq_queue_stats: this process only).

    Attributes:
        length: items in the queue now.
        pops: items popped by this handle's convenience pops.
        dedup: retries resolved by an idempotency marker (a 1021 that had committed).
        hc_*: high-contention counters (FIFO and priority queues opened in that mode).
    """

    length: int
    pops: int
    dedup: int
    hc_simple: int
    hc_registered: int
    hc_fulfils: int
    hc_fulfil_lost: int
    hc_returned: int
    hc_waits: int


_BYTESP = ctypes.POINTER(_lib.kvq_bytes)


def _values(arr: Any, width: int, n: int) -> List[bytes]:
    """The bytes of the first n kvq_buf (width 3) or kvq_bytes (width 2) of an array, its
    (data, len) fields read in one go."""
    if not n:
        return []
    f = (c_size_t * (width * n)).from_buffer(arr)[:]
    ch = ctypes.c_char  # (c_char * len) types are cached by ctypes; .raw copies the bytes
    return [(ch * f[i + 1]).from_address(f[i]).raw if f[i + 1] else b""
            for i in range(0, width * n, width)]


def _dispose(L: Any, bufs: Any, k: int) -> None:
    """Frees the buffers of a kvq_buf array that kvq filled (the others are still empty)."""
    f = (c_size_t * (3 * k)).from_buffer(bufs)[:]
    base = ctypes.addressof(bufs)
    size = ctypes.sizeof(_lib.kvq_buf)
    for i in range(k):
        if f[3 * i]:
            L.kvq_buf_dispose_at(base + i * size)


class Queue(Handle):
    """A named queue of the database (durable, FIFO or priority), shared by threads.

    Opened with Database.queue or Database.create_queue. Every operation has two forms: without
    ``tr`` it runs its own transaction with retries and is idempotent under
    commit_unknown_result (a push pushes exactly once, a pop removes at most one item); with
    ``tr=`` (a Transaction of Database.transact) it runs inside the caller's transaction and
    commits with the caller's own writes.

    Values are bytes (a str is pushed as UTF-8) of at most 100,000 bytes; pops return bytes.
    """

    _kind = "queue"

    def __init__(self, db: Database, name: str) -> None:
        super().__init__()
        if not isinstance(db, Database):
            raise TypeError(f"db must be a kvq.Database, not {type(db).__name__}")
        n = _name(name)
        self.db = db
        self.name = name
        s = _lib.kvq_queue_settings()
        p = c_void_p()
        with db._use() as dp:
            check(lib().kvq_queue_open_named(byref(p), byref(s), dp, n))
            self._opened(p.value)
            db._children.add(self)
        self.type: str = TYPE_NAMES.get(s.type, "unknown")
        """"durable", "fifo" or "priority"."""

    def _free(self, ptr: int) -> None:
        lib().kvq_queue_close(ptr)

    def __enter__(self) -> "Queue":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<kvq.Queue {self.name!r} {self.type}{' closed' if self.closed else ''}>"

    def _tr(self, tr: Any) -> int:
        if not isinstance(tr, Transaction):
            raise TypeError(f"tr must be a kvq.Transaction, not {type(tr).__name__}")
        if tr.db is not self.db:
            raise ValueError("tr belongs to another database handle")
        return tr._p()

    # --- pushes ----------------------------------------------------------------------------
    def push(self, value: Any, priority: Optional[int] = None, *,
             tr: Optional[Transaction] = None) -> None:
        """Pushes one value (bytes or str); ``priority`` on priority queues (lower pops first).

        Raises:
            ValueTooLargeError: over 100,000 bytes.
            WrongTypeError: a priority given to a queue that is not a priority queue.
        """
        v = as_bytes(value)
        L = lib()
        p = self._enter()
        try:
            if priority is None:
                if tr is None:
                    rc = L.kvq_queue_push(p, v, len(v))
                else:
                    rc = L.kvq_queue_push_txn(p, self._tr(tr), v, len(v))
            else:
                pr = as_int(priority, "priority")
                if tr is None:
                    rc = L.kvq_queue_push_prio(p, v, len(v), pr)
                else:
                    rc = L.kvq_queue_push_prio_txn(p, self._tr(tr), v, len(v), pr)
            if rc:
                raise error(rc)
        finally:
            self._exit()

    def push_many(self, values: Iterable[Any], *, tr: Optional[Transaction] = None) -> None:
        """Pushes 1 to 10,000 values in one transaction, in order: all of them or none.

        An empty iterable pushes nothing. Priority queues get them at priority 0.
        """
        vs = [as_bytes(v) for v in values]
        if not vs:
            return
        # one blob holds the values, and the kvq_bytes array points into it: pairs of
        # (address, length) built in one go rather than field by field
        blob = b"".join(vs)
        base = ctypes.cast(ctypes.c_char_p(blob), c_void_p).value or 0
        lens = [len(v) for v in vs]
        flat = [0] * (2 * len(vs))
        flat[0::2] = [base + o for o in itertools.accumulate(lens, initial=0)][:-1]
        flat[1::2] = lens
        arr = (c_size_t * len(flat))(*flat)
        L = lib()
        p = self._enter()
        try:
            if tr is None:
                rc = L.kvq_queue_push_many(p, ctypes.cast(arr, _BYTESP), len(vs))
            else:
                rc = L.kvq_queue_push_many_txn(p, self._tr(tr), ctypes.cast(arr, _BYTESP),
                                               len(vs))
            if rc:
                raise error(rc)
        finally:
            self._exit()
        del blob

    # --- pops ------------------------------------------------------------------------------
    def pop(self, n: Optional[int] = None, *, tr: Optional[Transaction] = None) -> Any:
        """Removes the first item (oldest; on a priority queue the lowest priority).

        Args:
            n: None for one item; else pop up to n (1 to 10,000) in one transaction.

        Returns:
            the value, or None when the queue is empty; with n, a list of up to n values
            (empty when the queue is empty).
        """
        L = lib()
        if n is None:
            p = self._enter()
            try:
                if tr is None:
                    rc = L.kvq_queue_pop(thread_buf_ref(), p)
                    if rc == 0:
                        buf = thread_buf()
                        return read(buf.data, buf.len)
                else:
                    out = _lib.kvq_bytes()
                    rc = L.kvq_queue_pop_txn(byref(out), p, self._tr(tr))
                    if rc == 0:
                        return read(out.data, out.len)
                if rc == _ENOTFOUND:
                    return None
                raise error(rc)
            finally:
                self._exit()
        k = as_int(n, "n")
        if k < 1 or k > 10000:
            raise ValueError("n must be from 1 to 10,000")
        got = c_size_t(0)
        with self._use() as p:
            if tr is None:
                bufs = (_lib.kvq_buf * k)()
                try:
                    rc = L.kvq_queue_pop_k(bufs, byref(got), p, k)
                    if rc == _ENOTFOUND:
                        return []
                    check(rc)
                    return _values(bufs, 3, got.value)
                finally:
                    _dispose(L, bufs, k)
            views = (_lib.kvq_bytes * k)()
            rc = L.kvq_queue_pop_k_txn(views, byref(got), p, self._tr(tr), k)
            if rc == _ENOTFOUND:
                return []
            check(rc)
            return _values(views, 2, got.value)

    def peek(self, *, tr: Optional[Transaction] = None, snapshot: bool = False) -> Optional[bytes]:
        """The first item's value without removing it, or None when the queue is empty.

        Inside a transaction the read conflicts with a change of the head unless snapshot.
        """
        L = lib()
        with self._use() as p:
            if tr is None:
                rc = L.kvq_queue_peek(thread_buf_ref(), p)
                if rc == _ENOTFOUND:
                    return None
                check(rc)
                buf = thread_buf()
                return read(buf.data, buf.len)
            out = _lib.kvq_bytes()
            rc = L.kvq_queue_peek_txn(byref(out), p, self._tr(tr), SNAPSHOT if snapshot else 0)
            if rc == _ENOTFOUND:
                return None
            check(rc)
            return read(out.data, out.len)

    def _prio(self, end: int, remove: bool, tr: Optional[Transaction],
              snapshot: bool = False) -> Optional[Tuple[int, bytes]]:
        L = lib()
        prio = c_int64(0)
        with self._use() as p:
            if tr is None:
                buf = _lib.kvq_buf()
                f = L.kvq_queue_pop_prio if remove else L.kvq_queue_peek_prio
                rc = f(byref(buf), byref(prio), p, end)
                if rc == _ENOTFOUND:
                    return None
                check(rc)
                return (prio.value, take(buf))
            out = _lib.kvq_bytes()
            if remove:
                rc = L.kvq_queue_pop_prio_txn(byref(out), byref(prio), p, self._tr(tr), end)
            else:
                rc = L.kvq_queue_peek_prio_txn(byref(out), byref(prio), p, self._tr(tr), end,
                                               SNAPSHOT if snapshot else 0)
            if rc == _ENOTFOUND:
                return None
            check(rc)
            return (prio.value, read(out.data, out.len))

    def pop_min(self, *, tr: Optional[Transaction] = None) -> Optional[Tuple[int, bytes]]:
        """Priority queues: removes the lowest-priority item (the oldest of that priority).

        Returns:
            (priority, value), or None when the queue is empty.
        """
        return self._prio(_MIN, True, tr)

    def pop_max(self, *, tr: Optional[Transaction] = None) -> Optional[Tuple[int, bytes]]:
        """Priority queues: removes the highest-priority item (the newest of that priority)."""
        return self._prio(_MAX, True, tr)

    def peek_min(self, *, tr: Optional[Transaction] = None,
                 snapshot: bool = False) -> Optional[Tuple[int, bytes]]:
        """Priority queues: (priority, value) of the lowest-priority item, not removed."""
        return self._prio(_MIN, False, tr, snapshot)

    def peek_max(self, *, tr: Optional[Transaction] = None,
                 snapshot: bool = False) -> Optional[Tuple[int, bytes]]:
        """Priority queues: (priority, value) of the highest-priority item, not removed."""
        return self._prio(_MAX, False, tr, snapshot)

    # --- size, contents --------------------------------------------------------------------
    def length(self, *, tr: Optional[Transaction] = None, snapshot: bool = False) -> int:
        """The number of items (durable: two counter reads; FIFO and priority: a count)."""
        n = c_uint64(0)
        with self._use() as p:
            if tr is None:
                check(lib().kvq_queue_len(byref(n), p))
            else:
                check(lib().kvq_queue_len_txn(byref(n), p, self._tr(tr),
                                              SNAPSHOT if snapshot else 0))
        return n.value

    def __len__(self) -> int:
        return self.length()

    def items(self) -> List[Tuple[int, bytes]]:
        """Every item as (priority, value) in queue order, without removing any (priority is 0
        except on priority queues). Read in pages, each its own read-only transaction."""
        out: List[Tuple[int, bytes]] = []

        def each(v: Any, prio: int, _payload: Any) -> int:
            out.append((prio, read(v.data, v.len)))
            return 0

        cb = _lib.ITER_FN(each)
        with self._use() as p:
            check(lib().kvq_queue_iterate(p, cb, None))
        return out

    def __iter__(self) -> Iterator[bytes]:
        """The values in queue order, as items() reads them (nothing is removed)."""
        return iter([v for _, v in self.items()])

    def clear(self, *, tr: Optional[Transaction] = None) -> None:
        """Removes every item (the queue and its name stay)."""
        with self._use() as p:
            if tr is None:
                check(lib().kvq_queue_clear(p))
            else:
                check(lib().kvq_queue_clear_txn(p, self._tr(tr)))

    def stats(self) -> QueueStats:
        """The length and this handle's counters."""
        s = _lib.kvq_queue_stats()
        length = self.length()
        with self._use() as p:
            check(lib().kvq_queue_get_stats(byref(s), p))
        return QueueStats(length=length, pops=s.pops, dedup=s.dedup, hc_simple=s.hc_simple,
                          hc_registered=s.hc_registered, hc_fulfils=s.hc_fulfils,
                          hc_fulfil_lost=s.hc_fulfil_lost, hc_returned=s.hc_returned,
                          hc_waits=s.hc_waits)

    # --- waiting consumers -----------------------------------------------------------------
    def _sleep_on(self, p: int, watch: int, deadline: Optional[float]) -> bool:
        """Sleeps on a watch until it fires (True) or the deadline passes (False); the GIL is
        released by ctypes meanwhile. Wakes every WAIT_SLICE to see a close or a signal."""
        L = lib()
        while True:
            if self._closing:
                raise ClosedError("the queue was closed while a consumer waited")
            slice_s = _handle.WAIT_SLICE
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                slice_s = min(slice_s, left)
            rc = L.kvq_watch_wait(watch, max(1, int(slice_s * 1000)))
            if rc == 0:
                return True
            if rc != _ETIMED_OUT:
                raise error(rc)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Sleeps until something is pushed (True) or timeout seconds pass (False; None waits
        forever). Uses kvq's watch on the push counter: no polling."""
        deadline = None if timeout is None else time.monotonic() + as_ms(timeout, "timeout") / 1e3
        L = lib()
        w = c_void_p()
        with self._use() as p:
            check(L.kvq_queue_watch(byref(w), p))
            try:
                return self._sleep_on(p, w.value, deadline)
            finally:
                L.kvq_watch_destroy(w.value)

    def consume(self, batch: int = 1, timeout: Optional[float] = None) -> Iterator[bytes]:
        """Yields items as they are pushed, sleeping on kvq's watch while the queue is empty.

        Each item is popped (at most once: removed when its transaction commits) before it is
        yielded; with batch > 1 up to that many are popped per transaction, and those not yet
        yielded when the loop stops are lost to the application. The iteration ends once the
        queue has stayed empty for timeout seconds (None: never). Other threads run while it
        sleeps (the GIL is released).
        """
        k = as_int(batch, "batch")
        if k < 1 or k > 10000:
            raise ValueError("batch must be from 1 to 10,000")
        t_ms = None if timeout is None else as_ms(timeout, "timeout")
        L = lib()
        deadline = None if t_ms is None else time.monotonic() + t_ms / 1e3
        while True:
            bufs = (_lib.kvq_buf * k)()
            got = c_size_t(0)
            w = c_void_p()
            items: List[bytes] = []
            fired = True
            with self._use() as p:
                try:
                    check(L.kvq_queue_consume_k(bufs, byref(got), byref(w), p, k))
                    items = _values(bufs, 3, got.value)
                    if not items and w.value:
                        fired = self._sleep_on(p, w.value, deadline)
                finally:
                    _dispose(L, bufs, k)
                    if w.value:
                        L.kvq_watch_destroy(w.value)
            if items:
                yield from items
                deadline = None if t_ms is None else time.monotonic() + t_ms / 1e3
            elif not fired:
                return
