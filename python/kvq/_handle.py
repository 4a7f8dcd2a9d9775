"""What every handle of the package shares (private): the library, errors, values, lifetimes.

A handle owns one C object. Calls into it are counted, so that close() (from any thread) waits
for the calls in progress and frees the object only once nobody uses it; blocking waits are cut
into slices of at most WAIT_SLICE seconds so that they see a close (and Ctrl-C) in time. After
fork() every handle of the parent refuses to work in the child (ForkedError) and is dropped
without calling the C library, which must not use the parent's handles (include/kvq/db.h).
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, Optional, Union

from . import _lib
from .errors import ClosedError, ForkedError, KvqError, error_class

# Longest single sleep inside the C library, in seconds: a waiting consumer comes back to
# Python this often to notice a close() or a signal (KeyboardInterrupt), then sleeps again.
WAIT_SLICE = 1.0

Value = Union[bytes, bytearray, memoryview, str]

_generation = 0  # bumped in a forked child: handles of an older generation are the parent's


def _after_fork_in_child() -> None:
    global _generation
    _generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


def lib() -> ctypes.CDLL:
    return _lib.load()


def error(rc: int) -> KvqError:
    """The exception for a kvq code, with the detail the failing call recorded on this thread."""
    L = lib()
    detail = ""
    if L.kvq_last_error_code() == rc:
        detail = (L.kvq_last_error() or b"").decode("utf-8", "replace")
    message = (L.kvq_strerror(rc) or b"").decode("utf-8", "replace")
    cls = error_class(rc)
    return cls(message, detail, code=rc if cls is KvqError else None)


def check(rc: int) -> None:
    if rc:
        raise error(rc)


def as_bytes(v: Any, what: str = "value") -> bytes:
    """bytes for a value given as bytes, bytearray, memoryview or str (UTF-8)."""
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    raise TypeError(f"{what} must be bytes or str, not {type(v).__name__}")


def as_ms(seconds: Any, what: str) -> int:
    """Milliseconds for a duration given in seconds (int or float, not negative)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(seconds).__name__}")
    if seconds != seconds or seconds < 0:
        raise ValueError(f"{what} must be a number of seconds >= 0, not {seconds!r}")
    if seconds == float("inf"):
        raise ValueError(f"{what} must be finite")
    return int(round(seconds * 1000))


def as_int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what} must be an int, not {type(v).__name__}")
    return v


def read(data: Optional[int], length: int) -> bytes:
    if not length:
        return b""
    return ctypes.string_at(data, length)


def take(buf: _lib.kvq_buf) -> bytes:
    """The bytes of a kvq_buf, which is then disposed of."""
    try:
        return read(buf.data, buf.len)
    finally:
        lib().kvq_buf_dispose(ctypes.byref(buf))


class _Buf:
    """A kvq_buf that frees its memory with kvq_buf_dispose when it is collected."""

    __slots__ = ("buf", "ref")

    def __init__(self) -> None:
        self.buf = _lib.kvq_buf()
        self.ref = ctypes.byref(self.buf)

    def __del__(self) -> None:
        try:
            if self.buf.data and _lib._lib is not None:
                _lib._lib.kvq_buf_dispose(self.ref)
        except Exception:
            pass


class _ThreadBuf(threading.local):
    """One kvq_buf per thread that single pops and peeks fill again and again (kvq replaces its
    content and grows it as needed), as a C program reuses its buffer; freed when the thread
    ends (its per-thread _Buf is collected then)."""

    def __init__(self) -> None:
        self.b = _Buf()


_tbuf = _ThreadBuf()


def thread_buf() -> _lib.kvq_buf:
    """This thread's reusable buffer (read its bytes before the next call that fills it)."""
    return _tbuf.b.buf


def thread_buf_ref() -> Any:
    """A byref() of thread_buf(), made once."""
    return _tbuf.b.ref


class Handle:
    """A C object with counted use and a close that waits for the calls in progress."""

    _kind = "handle"

    def __init__(self) -> None:
        self._ptr: Optional[int] = None
        self._gen = _generation
        self._lock = threading.Lock()  # taken by every call: a C-level lock, no Python frame
        self._cv = threading.Condition(self._lock)  # close() waits on it
        self._busy = 0
        self._closing = False

    # --- use -------------------------------------------------------------------------------
    def _enter(self) -> int:
        if self._gen != _generation:
            raise ForkedError(
                f"this {self._kind} was opened by process {self._opener_pid} and cannot be used "
                "after fork(): open the database again in this process",
            )
        with self._lock:
            if self._closing or self._ptr is None:
                raise ClosedError(f"the {self._kind} is closed")
            self._busy += 1
            return self._ptr

    def _exit(self) -> None:
        with self._lock:
            self._busy -= 1
            if self._busy == 0 and self._closing:
                self._cv.notify_all()

    class _Use:
        __slots__ = ("h", "p")

        def __init__(self, h: "Handle") -> None:
            self.h = h

        def __enter__(self) -> int:
            self.p = self.h._enter()
            return self.p

        def __exit__(self, *exc: Any) -> None:
            self.h._exit()

    def _use(self) -> "Handle._Use":
        return Handle._Use(self)

    @property
    def closed(self) -> bool:
        """True once close() was called (or the handle belongs to a parent process)."""
        return self._ptr is None or self._closing or self._gen != _generation

    # --- closing ---------------------------------------------------------------------------
    def _free(self, ptr: int) -> None:  # overridden: the C destructor
        raise NotImplementedError

    def _before_free(self) -> None:  # overridden: close what depends on this handle
        pass

    def close(self) -> None:
        """Closes the handle, waiting for calls in progress in other threads. Idempotent."""
        if self._gen != _generation:
            self._ptr = None  # the parent's object: never touch it from a forked child
            return
        with self._cv:
            if self._ptr is None or self._closing:
                return
            self._closing = True
        self._before_free()
        with self._cv:
            while self._busy:
                self._cv.wait()
            ptr, self._ptr = self._ptr, None
        if ptr is not None:
            self._free(ptr)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    _opener_pid = os.getpid()

    def _opened(self, ptr: int) -> None:
        self._ptr = ptr
        self._opener_pid = os.getpid()
