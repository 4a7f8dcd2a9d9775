"""Databases and transactions (private module; the names are exported by kvq)."""

from __future__ import annotations

import ctypes
import functools
import os
import weakref
from ctypes import byref, c_int, c_int64, c_size_t, c_void_p
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union

from . import _lib
from ._handle import Handle, as_bytes, as_int, as_ms, check, error, lib, read
from .errors import ClosedError, KvqError

if TYPE_CHECKING:  # pragma: no cover
    from ._queue import Queue
    from ._workq import WorkQueue

T = TypeVar("T")

SNAPSHOT = 1
REVERSE = 2
_EUSER = 9007
_EEXISTS = 9011

QUEUE_TYPES: Dict[str, int] = {"fifo": 1, "priority": 2, "durable": 3}
TYPE_NAMES: Dict[int, str] = {v: k for k, v in QUEUE_TYPES.items()}


@dataclass(frozen=True)
class QueueInfo:
    """A named queue as the database's registry holds it (`kvq queues` lists the same).

    Attributes:
        name: the queue's name.
        type: "durable", "fifo" or "priority".
        lease: work-queue lease in seconds (None: the library's default, 30 s).
        max_deliveries: deliveries before an item goes to the dead letters; 0 never.
    """

    name: str
    type: str
    lease: Optional[float]
    max_deliveries: int


def _info(name: str, s: _lib.kvq_queue_settings) -> QueueInfo:
    return QueueInfo(
        name=name,
        type=TYPE_NAMES.get(s.type, "unknown"),
        lease=(s.lease_ms / 1000.0) if s.lease_ms else None,
        max_deliveries=int(s.max_deliveries),
    )


def _name(name: Any) -> bytes:
    if not isinstance(name, str):
        raise TypeError(f"a queue name must be a str, not {type(name).__name__}")
    return name.encode("utf-8")


class Database(Handle):
    """An open kvq database; a context manager, shared by any number of threads.

    Args:
        url: a directory (the embedded engine), ``sqlite:DIR`` (a new database on the older
            SQLite storage, kept for the databases made with it), ``fdb:`` or ``fdb:/path/to/fdb.cluster`` (a FoundationDB
            cluster); None means ``$KVQ_DB`` or else ``./kvq-data``, as in C.
        create: make the database when it does not exist (default True).
        read_only: open read-only: writing commits fail with PermissionDeniedError.
        relaxed: do not wait for each commit to reach the disk (not durable).
        retry_limit: retries of a transaction after its first attempt (default 100; -1 none).
        timeout: a transaction's time budget in seconds (default: none).

    Raises:
        NotFoundError: the database is missing and create is False.
        DatabaseDamagedError, PermissionDeniedError, IoError, EngineUnavailableError ...
    """

    _kind = "database"

    def __init__(
        self,
        url: Union[str, "os.PathLike[str]", None] = None,
        *,
        create: bool = True,
        read_only: bool = False,
        relaxed: bool = False,
        retry_limit: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> None:
        super().__init__()
        self._children: "weakref.WeakSet[Handle]" = weakref.WeakSet()
        if url is not None and not isinstance(url, (str, os.PathLike)):
            raise TypeError(f"url must be a str or a path, not {type(url).__name__}")
        self.url: Optional[str] = os.fspath(url) if url is not None else None
        L = lib()
        opts = _lib.kvq_db_options(2, 0, 100, 0, 1000, 0o600, 710)
        if not create:
            opts.flags |= 2
        if read_only:
            opts.flags |= 4
        if relaxed:
            opts.flags |= 1
        if retry_limit is not None:
            opts.retry_limit = as_int(retry_limit, "retry_limit")
        if timeout is not None:
            opts.timeout_ms = as_ms(timeout, "timeout")
        p = c_void_p()
        u = self.url.encode("utf-8") if self.url is not None else None
        check(L.kvq_db_open(byref(p), u, byref(opts)))
        self._opened(p.value)

    def _free(self, ptr: int) -> None:
        lib().kvq_db_close(ptr)

    def _before_free(self) -> None:
        for child in list(self._children):
            child.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<kvq.Database {self.url!r} {state}>"

    @property
    def engine(self) -> str:
        """The engine's name: "embedded" or "fdb"."""
        with self._use() as p:
            return (lib().kvq_db_get_engine(p) or b"").decode()

    def stats(self) -> Dict[str, int]:
        """The handle's counters: commits, conflicts, retries, batches, injected_faults, syncs."""
        s = _lib.kvq_db_stats()
        with self._use() as p:
            check(lib().kvq_db_get_stats(byref(s), p))
        return {n: int(getattr(s, n)) for n, _ in _lib.kvq_db_stats._fields_}

    # --- transactions ----------------------------------------------------------------------
    def transact(self, fn: Callable[["Transaction"], T]) -> T:
        """Runs fn(tr) in a transaction and commits it, retrying as kvq_db_transact does.

        fn may run several times (after a conflict, 1020, or an unknown commit result, 1021),
        so it must have no effect outside the transaction but its return value. A kvq error
        raised inside fn (by a read, or by a queue operation given tr=) is handed to the retry
        loop: retryable ones run fn again, others end the transaction and are raised here. Any
        other exception ends it with nothing committed and is raised here unchanged.

        Returns:
            what fn returned in the attempt that committed.
        """
        if not callable(fn):
            raise TypeError("transact() needs a callable taking a Transaction")
        state: Dict[str, Any] = {}

        def body(txn: int, _payload: Any) -> int:
            tr = Transaction(self, txn)
            try:
                state["result"] = fn(tr)
                state.pop("exc", None)
                return 0
            except KvqError as e:
                state["exc"] = e
                return e.code if e.code else _EUSER
            except BaseException as e:  # noqa: B902 - carried out of the C frame, raised below
                state["exc"] = e
                return _EUSER
            finally:
                tr._ptr = None

        cb = _lib.TXN_FN(body)
        with self._use() as p:
            rc = lib().kvq_db_transact(p, cb, None)
        if rc:
            exc = state.get("exc")
            if exc is not None and (getattr(exc, "code", None) == rc or rc == _EUSER):
                raise exc
            raise error(rc)
        return state["result"]

    # --- named queues ----------------------------------------------------------------------
    def create_queue(
        self,
        name: str,
        type: str = "durable",
        *,
        lease: Optional[float] = None,
        max_deliveries: Optional[int] = None,
        adopt: bool = False,
        exist_ok: bool = True,
    ) -> "Queue":
        """Creates a named queue (as ``kvq create``) and opens it.

        Args:
            name: 1 to 200 bytes of UTF-8 without control characters.
            type: "durable" (default), "fifo" or "priority".
            lease: work-queue lease in seconds (durable and priority; default 30 s).
            max_deliveries: deliveries before the dead letters (default 5; 0 never).
            adopt: accept a subspace that already holds a queue another program wrote.
            exist_ok: an existing queue of this type is opened (default); else
                AlreadyExistsError.

        Raises:
            WrongTypeError: the name exists with another type, or its subspace holds keys.
        """
        from ._queue import Queue

        n = _name(name)
        if type not in QUEUE_TYPES:
            raise ValueError(f"type must be one of {sorted(QUEUE_TYPES)}, not {type!r}")
        s = _lib.kvq_queue_settings(1, QUEUE_TYPES[type], 0, 5, 0)
        if type == "fifo":
            s.max_deliveries = 0
        if lease is not None:
            s.lease_ms = as_ms(lease, "lease")
        if max_deliveries is not None:
            s.max_deliveries = as_int(max_deliveries, "max_deliveries")
        if adopt:
            s.flags = 1
        with self._use() as p:
            rc = lib().kvq_queue_create_named(p, n, byref(s))
            if rc and not (rc == _EEXISTS and exist_ok):
                raise error(rc)
        return Queue(self, name)

    def queue(self, name: str) -> "Queue":
        """Opens a named queue, with the type it was created with.

        Raises:
            NotFoundError: no queue has this name (create_queue makes one).
        """
        from ._queue import Queue

        return Queue(self, name)

    def work_queue(
        self,
        name: str,
        *,
        lease: Optional[float] = None,
        max_deliveries: Optional[int] = None,
        dedup_window: Optional[float] = None,
    ) -> "WorkQueue":
        """Opens a named durable or priority queue as a work queue (leases, acks, dead letters).

        Without arguments it takes the lease and max deliveries stored with the queue.

        Args:
            lease: default lease in seconds.
            max_deliveries: deliveries before the dead letters; 0 never.
            dedup_window: seconds a deduplication key is remembered (default 300).
        """
        from ._workq import WorkQueue

        return WorkQueue(
            self, name, lease=lease, max_deliveries=max_deliveries, dedup_window=dedup_window
        )

    def queue_info(self, name: str) -> QueueInfo:
        """The stored settings of a named queue (NotFoundError if there is none)."""
        s = _lib.kvq_queue_settings()
        with self._use() as p:
            check(lib().kvq_queue_get_named(byref(s), p, _name(name)))
        return _info(name, s)

    def queues(self) -> List[QueueInfo]:
        """Every named queue, in name order."""
        out: List[QueueInfo] = []

        def each(name: bytes, s: Any, _payload: Any) -> int:
            out.append(_info(name.decode("utf-8", "replace"), s.contents))
            return 0

        cb = _lib.NAMED_FN(each)
        with self._use() as p:
            check(lib().kvq_queue_list_named(p, cb, None))
        return out

    def alter_queue(
        self, name: str, *, lease: Optional[float] = None, max_deliveries: Optional[int] = None
    ) -> QueueInfo:
        """Changes a durable or priority queue's lease (seconds) and max deliveries."""
        s = _lib.kvq_queue_settings()
        lm = -1 if lease is None else as_ms(lease, "lease")
        md = -1 if max_deliveries is None else as_int(max_deliveries, "max_deliveries")
        with self._use() as p:
            check(lib().kvq_queue_alter_named(byref(s), p, _name(name), lm, md))
        return _info(name, s)

    def delete_queue(self, name: str) -> None:
        """Deletes a named queue: its items, its bookkeeping and its name (one transaction)."""
        with self._use() as p:
            check(lib().kvq_queue_delete_named(p, _name(name)))

    def forget_queue(self, name: str) -> None:
        """Removes a name from the registry, leaving the queue's data."""
        with self._use() as p:
            check(lib().kvq_queue_forget_named(p, _name(name)))


class Transaction:
    """The transaction a function run by Database.transact receives (one thread at a time).

    It is valid only during that call. Reads see one snapshot plus the transaction's own
    writes; a read without ``snapshot=True`` makes the commit fail with NotCommittedError (and
    be retried) when another transaction wrote what it read. Keys and values are bytes (a str
    is encoded as UTF-8); keys from 0xFF are the system space.
    """

    __slots__ = ("db", "_ptr")

    def __init__(self, db: Database, ptr: int) -> None:
        self.db = db
        self._ptr: Optional[int] = ptr

    def _p(self) -> int:
        p = self._ptr
        if p is None:
            raise ClosedError("the transaction is over (use it only inside its function)")
        return p

    def get(self, key: Any, *, snapshot: bool = False) -> Optional[bytes]:
        """The value of a key, or None when it is absent."""
        k = as_bytes(key, "key")
        out = _lib.kvq_bytes()
        present = c_int(0)
        check(lib().kvq_txn_get(byref(out), byref(present), self._p(), k, len(k),
                                SNAPSHOT if snapshot else 0))
        return read(out.data, out.len) if present.value else None

    def set(self, key: Any, value: Any) -> None:
        """Sets a key (written at commit)."""
        k = as_bytes(key, "key")
        v = as_bytes(value)
        check(lib().kvq_txn_set(self._p(), k, len(k), v, len(v)))

    def clear(self, key: Any) -> None:
        """Clears a key."""
        k = as_bytes(key, "key")
        check(lib().kvq_txn_clear(self._p(), k, len(k)))

    def clear_range(self, begin: Any, end: Any) -> None:
        """Clears every key in [begin, end)."""
        b = as_bytes(begin, "begin")
        e = as_bytes(end, "end")
        check(lib().kvq_txn_clear_range(self._p(), b, len(b), e, len(e)))

    def get_range(
        self,
        begin: Any,
        end: Any,
        *,
        limit: int = 0,
        reverse: bool = False,
        snapshot: bool = False,
    ) -> List[Tuple[bytes, bytes]]:
        """The (key, value) pairs in [begin, end), in key order (or reversed); limit 0 is all."""
        b = as_bytes(begin, "begin")
        e = as_bytes(end, "end")
        lim = as_int(limit, "limit")
        if lim < 0:
            raise ValueError("limit must be >= 0")
        kvs = ctypes.POINTER(_lib.kvq_kv)()
        count = c_size_t(0)
        more = ctypes.c_bool(False)
        flags = (SNAPSHOT if snapshot else 0) | (REVERSE if reverse else 0)
        check(lib().kvq_txn_get_range(byref(kvs), byref(count), byref(more), self._p(), b,
                                      len(b), e, len(e), lim, flags))
        out = []
        for i in range(count.value):
            kv = kvs[i]
            out.append((read(kv.key.data, kv.key.len), read(kv.value.data, kv.value.len)))
        return out

    def add(self, key: Any, delta: int) -> None:
        """Adds delta to a little-endian 8-byte counter at commit (an atomic op: no conflict)."""
        k = as_bytes(key, "key")
        d = as_int(delta, "delta")
        param = (d & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")
        check(lib().kvq_txn_atomic_op(self._p(), k, len(k), param, 8, 2))

    def read_version(self) -> int:
        """The transaction's read version (about a million a second of database time)."""
        v = c_int64(0)
        check(lib().kvq_txn_get_read_version(byref(v), self._p()))
        return v.value


def transactional(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorator: the function's first argument is a Database or a Transaction.

    Called with a Database, the function runs in a new transaction (Database.transact, with its
    retries); called with a Transaction, it runs inside it, so that decorated functions compose
    into one transaction.
    """

    @functools.wraps(fn)
    def wrapper(db_or_tr: Union[Database, Transaction], *args: Any, **kwargs: Any) -> T:
        if isinstance(db_or_tr, Transaction):
            return fn(db_or_tr, *args, **kwargs)
        if isinstance(db_or_tr, Database):
            return db_or_tr.transact(lambda tr: fn(tr, *args, **kwargs))
        raise TypeError(
            f"{fn.__name__}() needs a kvq.Database or kvq.Transaction first, "
            f"not {type(db_or_tr).__name__}"
        )

    return wrapper

