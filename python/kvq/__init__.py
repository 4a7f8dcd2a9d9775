"""kvq for Python: durable, transactional queues over kvq's C library (ctypes, no build step).

    import kvq
    with kvq.Database("./kvq-data") as db:
        jobs = db.create_queue("jobs")          # as `kvq create jobs`
        jobs.push("hello")
        print(jobs.pop())                       # b'hello'

The library is found through $KVQ_LIBRARY (a path to libkvq.so) when it is set, else as an
installed kvq (`cmake --install`); see docs/python.md.
"""

from __future__ import annotations

from typing import Optional

from . import _handle
from ._db import Database, QueueInfo, Transaction, transactional
from ._queue import Queue, QueueStats
from ._workq import DeadLetter, Message, WorkItem, WorkQueue, WorkQueueStats
from .errors import *  # noqa: F401,F403 - one class per kvq error
from .errors import __all__ as _error_names

__version__ = "0.1.0"

__all__ = [
    "Database",
    "Transaction",
    "transactional",
    "Queue",
    "QueueInfo",
    "QueueStats",
    "WorkQueue",
    "Message",
    "WorkItem",
    "DeadLetter",
    "WorkQueueStats",
    "library_version",
    "library_path",
    *_error_names,
]


def library_version() -> str:
    """The version of the loaded libkvq ("0.1.0"); loads the library if needed."""
    return (_handle.lib().kvq_version() or b"").decode()


def library_path() -> Optional[str]:
    """Where libkvq was loaded from (a path or a soname), or None before its first use."""
    from . import _lib

    return _lib.library_path()
