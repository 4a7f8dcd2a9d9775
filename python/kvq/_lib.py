"""Finding and loading libkvq.so, and the C prototypes the package calls (private).

Lookup order (docs/python.md): $KVQ_LIBRARY when it is set (an explicit choice wins, so that a
build tree's library can be tested beside an installed one), then an installed kvq (the
dynamic linker's own search, ctypes.util.find_library, the usual `cmake --install` prefixes),
then LibraryNotFoundError saying what to do. The library is loaded on first use, so that
`import kvq` never fails.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_bool,
    c_char_p,
    c_int,
    c_int64,
    c_size_t,
    c_uint,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)
from typing import List, Optional

from .errors import LibraryNotFoundError

# Prefixes `cmake --install` uses by default, and Debian's library directories.
_PREFIX_DIRS = (
    "/usr/local/lib",
    "/usr/local/lib64",
    "/usr/local/lib/x86_64-linux-gnu",
    "/usr/local/lib/aarch64-linux-gnu",
    "/usr/lib",
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
)
_NAMES = ("libkvq.so.0", "libkvq.so")


class kvq_bytes(Structure):
    _fields_ = [("data", c_void_p), ("len", c_size_t)]


class kvq_buf(Structure):
    _fields_ = [("data", c_void_p), ("len", c_size_t), ("cap", c_size_t)]


class kvq_kv(Structure):
    _fields_ = [("key", kvq_bytes), ("value", kvq_bytes)]


class kvq_db_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("flags", c_uint),
        ("retry_limit", c_int),
        ("timeout_ms", c_int64),
        ("max_retry_delay_ms", c_int64),
        ("file_mode", c_uint),
        ("api_version", c_int),
    ]


class kvq_db_stats(Structure):
    _fields_ = [
        (n, c_uint64)
        for n in ("commits", "conflicts", "retries", "batches", "injected_faults", "syncs")
    ]


class kvq_queue_settings(Structure):
    _fields_ = [
        ("version", c_uint),
        ("type", c_int),
        ("lease_ms", c_int64),
        ("max_deliveries", c_uint32),
        ("flags", c_uint),
    ]


class kvq_queue_stats(Structure):
    _fields_ = [
        (n, c_uint64)
        for n in (
            "pops",
            "hc_simple",
            "hc_registered",
            "hc_fulfils",
            "hc_fulfil_lost",
            "hc_returned",
            "hc_waits",
            "dedup",
        )
    ]


class kvq_workq_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("lease_ms", c_int64),
        ("max_deliveries", c_uint32),
        ("dedup_window_ms", c_int64),
    ]


class kvq_workq_lease(Structure):
    _fields_ = [
        ("id", c_uint8 * 16),
        ("received", c_int64),
        ("deadline", c_int64),
        ("deliveries", c_uint32),
        ("priority", c_int64),
    ]


class kvq_workq_push_options(Structure):
    _fields_ = [
        ("version", c_uint),
        ("priority", c_int64),
        ("delay_ms", c_int64),
        ("not_before", c_int64),
        ("dedup_key", c_void_p),
        ("dedup_len", c_size_t),
    ]


class kvq_workq_item(Structure):
    _fields_ = [
        ("value", kvq_bytes),
        ("deliveries", c_uint32),
        ("priority", c_int64),
        ("due_ms", c_int64),
        ("lease", kvq_workq_lease),
    ]


class kvq_workq_stats(Structure):
    _fields_ = [
        (n, c_int64)
        for n in (
            "ready",
            "inflight",
            "delayed",
            "dead",
            "oldest_ready_age_ms",
            "received",
            "taken",
            "acked",
            "requeued",
            "dead_lettered",
            "cleared",
            "cleared_ready",
        )
    ]


TXN_FN = CFUNCTYPE(c_int, c_void_p, c_void_p)
NAMED_FN = CFUNCTYPE(c_int, c_char_p, POINTER(kvq_queue_settings), c_void_p)
DLQ_FN = CFUNCTYPE(c_int, kvq_bytes, c_uint32, c_void_p)
ITEM_FN = CFUNCTYPE(c_int, POINTER(kvq_workq_item), c_void_p)
ITER_FN = CFUNCTYPE(c_int, kvq_bytes, c_int64, c_void_p)

P = c_void_p
PP = POINTER(c_void_p)
U8P = c_char_p  # bytes passed in; c_char_p keeps embedded NULs when given a bytes object
SZ = c_size_t
BUFP = POINTER(kvq_buf)
BYTESP = POINTER(kvq_bytes)
LEASEP = POINTER(kvq_workq_lease)

# name: (restype, argtypes)
_PROTOS = {
    "kvq_version": (c_char_p, []),
    "kvq_strerror": (c_char_p, [c_int]),
    "kvq_errname": (c_char_p, [c_int]),
    "kvq_last_error": (c_char_p, []),
    "kvq_last_error_code": (c_int, []),
    "kvq_error_retryable": (c_bool, [c_int]),
    "kvq_buf_dispose": (None, [BUFP]),
    # databases and transactions
    "kvq_db_open": (c_int, [PP, c_char_p, POINTER(kvq_db_options)]),
    "kvq_db_close": (None, [P]),
    "kvq_db_get_engine": (c_char_p, [P]),
    "kvq_db_get_stats": (c_int, [POINTER(kvq_db_stats), P]),
    "kvq_db_transact": (c_int, [P, TXN_FN, P]),
    "kvq_txn_get": (c_int, [BYTESP, POINTER(c_int), P, U8P, SZ, c_uint]),
    "kvq_txn_get_range": (
        c_int,
        [POINTER(POINTER(kvq_kv)), POINTER(SZ), POINTER(c_bool), P, U8P, SZ, U8P, SZ, c_int,
         c_uint],
    ),
    "kvq_txn_set": (c_int, [P, U8P, SZ, U8P, SZ]),
    "kvq_txn_clear": (c_int, [P, U8P, SZ]),
    "kvq_txn_clear_range": (c_int, [P, U8P, SZ, U8P, SZ]),
    "kvq_txn_atomic_op": (c_int, [P, U8P, SZ, U8P, SZ, c_int]),
    "kvq_txn_get_read_version": (c_int, [POINTER(c_int64), P]),
    # named queues
    "kvq_queue_create_named": (c_int, [P, c_char_p, POINTER(kvq_queue_settings)]),
    "kvq_queue_get_named": (c_int, [POINTER(kvq_queue_settings), P, c_char_p]),
    "kvq_queue_alter_named": (
        c_int,
        [POINTER(kvq_queue_settings), P, c_char_p, c_int64, c_int64],
    ),
    "kvq_queue_forget_named": (c_int, [P, c_char_p]),
    "kvq_queue_delete_named": (c_int, [P, c_char_p]),
    "kvq_queue_list_named": (c_int, [P, NAMED_FN, P]),
    "kvq_queue_open_named": (c_int, [PP, POINTER(kvq_queue_settings), P, c_char_p]),
    "kvq_queue_close": (None, [P]),
    "kvq_queue_get_type": (c_int, [P]),
    # queue operations
    "kvq_queue_push": (c_int, [P, U8P, SZ]),
    "kvq_queue_push_txn": (c_int, [P, P, U8P, SZ]),
    "kvq_queue_push_prio": (c_int, [P, U8P, SZ, c_int64]),
    "kvq_queue_push_prio_txn": (c_int, [P, P, U8P, SZ, c_int64]),
    "kvq_queue_push_many": (c_int, [P, BYTESP, SZ]),
    "kvq_queue_push_many_txn": (c_int, [P, P, BYTESP, SZ]),
    "kvq_queue_pop": (c_int, [BUFP, P]),
    "kvq_queue_pop_txn": (c_int, [BYTESP, P, P]),
    "kvq_queue_pop_k": (c_int, [BUFP, POINTER(SZ), P, SZ]),
    "kvq_queue_pop_k_txn": (c_int, [BYTESP, POINTER(SZ), P, P, SZ]),
    "kvq_queue_pop_prio": (c_int, [BUFP, POINTER(c_int64), P, c_int]),
    "kvq_queue_pop_prio_txn": (c_int, [BYTESP, POINTER(c_int64), P, P, c_int]),
    "kvq_queue_peek": (c_int, [BUFP, P]),
    "kvq_queue_peek_txn": (c_int, [BYTESP, P, P, c_uint]),
    "kvq_queue_peek_prio": (c_int, [BUFP, POINTER(c_int64), P, c_int]),
    "kvq_queue_peek_prio_txn": (c_int, [BYTESP, POINTER(c_int64), P, P, c_int, c_uint]),
    "kvq_queue_len": (c_int, [POINTER(c_uint64), P]),
    "kvq_queue_len_txn": (c_int, [POINTER(c_uint64), P, P, c_uint]),
    "kvq_queue_clear": (c_int, [P]),
    "kvq_queue_clear_txn": (c_int, [P, P]),
    "kvq_queue_iterate": (c_int, [P, ITER_FN, P]),
    "kvq_queue_consume_k": (c_int, [BUFP, POINTER(SZ), PP, P, SZ]),
    "kvq_queue_watch": (c_int, [PP, P]),
    "kvq_queue_get_stats": (c_int, [POINTER(kvq_queue_stats), P]),
    "kvq_watch_wait": (c_int, [P, c_int64]),
    "kvq_watch_cancel": (None, [P]),
    "kvq_watch_destroy": (None, [P]),
    # work queues
    "kvq_workq_open": (c_int, [PP, P, POINTER(kvq_workq_options)]),
    "kvq_workq_close": (None, [P]),
    "kvq_workq_push": (c_int, [POINTER(c_bool), P, U8P, SZ, POINTER(kvq_workq_push_options)]),
    "kvq_workq_push_txn": (
        c_int,
        [POINTER(c_bool), P, P, U8P, SZ, POINTER(kvq_workq_push_options)],
    ),
    "kvq_workq_receive": (c_int, [BUFP, LEASEP, P, c_int64]),
    "kvq_workq_receive_wait": (c_int, [BUFP, LEASEP, P, c_int64, c_int64]),
    "kvq_workq_receive_txn": (c_int, [BYTESP, LEASEP, P, P, c_int64]),
    "kvq_workq_ack": (c_int, [P, LEASEP]),
    "kvq_workq_ack_txn": (c_int, [P, P, LEASEP]),
    "kvq_workq_nack": (c_int, [P, LEASEP, c_int64]),
    "kvq_workq_nack_txn": (c_int, [P, P, LEASEP, c_int64]),
    "kvq_workq_extend": (c_int, [P, LEASEP, c_int64]),
    "kvq_workq_extend_txn": (c_int, [P, P, LEASEP, c_int64]),
    "kvq_workq_recover": (c_int, [POINTER(c_uint64), P]),
    "kvq_workq_dlq_list": (c_int, [P, DLQ_FN, P]),
    "kvq_workq_dlq_redrive": (c_int, [POINTER(c_uint64), P]),
    "kvq_workq_dlq_purge": (c_int, [POINTER(c_uint64), P]),
    "kvq_workq_list_inflight": (c_int, [P, ITEM_FN, P]),
    "kvq_workq_list_delayed": (c_int, [P, ITEM_FN, P]),
    "kvq_workq_get_stats": (c_int, [POINTER(kvq_workq_stats), P]),
    "kvq_workq_purge": (c_int, [POINTER(c_uint64), P]),
    "kvq_workq_lease_format": (c_int, [c_char_p, SZ, POINTER(SZ), LEASEP]),
    "kvq_workq_lease_parse": (c_int, [LEASEP, c_char_p]),
}

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_path: Optional[str] = None


def _candidates() -> List[str]:
    """Where an installed libkvq may be, in the order tried."""
    out: List[str] = list(_NAMES)  # the dynamic linker's own search (ld.so.cache, LD_LIBRARY_PATH)
    found = ctypes.util.find_library("kvq")
    if found:
        out.append(found)
    for d in _PREFIX_DIRS:
        for n in _NAMES:
            out.append(os.path.join(d, n))
    return out


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    for name, (res, args) in _PROTOS.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    # kvq_buf_dispose again, taking a plain address (a buffer inside an array of kvq_buf)
    at = lib["kvq_buf_dispose"]
    at.restype = None
    at.argtypes = [c_void_p]
    lib.kvq_buf_dispose_at = at
    return lib


def load() -> ctypes.CDLL:
    """The loaded library, loading it on the first call; LibraryNotFoundError if none."""
    global _lib, _path
    lib = _lib
    if lib is not None:
        return lib
    with _lock:
        if _lib is not None:
            return _lib
        tried: List[str] = []
        env = os.environ.get("KVQ_LIBRARY")
        if env:
            try:
                lib = ctypes.CDLL(env)
            except OSError as e:
                raise LibraryNotFoundError(
                    f"KVQ_LIBRARY={env} cannot be loaded ({e}); point it at a built libkvq.so "
                    "(for instance build/libkvq.so of a kvq build tree) or unset it to use an "
                    "installed kvq"
                ) from None
            try:
                _lib = _bind(lib)
            except AttributeError as e:
                raise LibraryNotFoundError(
                    f"KVQ_LIBRARY={env} is not a kvq library this package can use ({e})"
                ) from None
            _path = env
            return _lib
        for cand in _candidates():
            tried.append(cand)
            try:
                lib = ctypes.CDLL(cand)
                _lib = _bind(lib)
                _path = cand
                return _lib
            except (OSError, AttributeError):
                continue
        raise LibraryNotFoundError(
            "libkvq.so was not found: install kvq (cmake --build build && cmake --install "
            "build, then ldconfig) or set KVQ_LIBRARY to the path of a built libkvq.so, for "
            "instance KVQ_LIBRARY=$PWD/build/libkvq.so (looked for: " + ", ".join(tried) + ")"
        )


def library_path() -> Optional[str]:
    """The path (or soname) the library was loaded from, or None before the first use."""
    return _path
