"""Errors as exceptions, and bad input: wrong types, closed handles, a missing library."""

import os
import re

import pytest

import kvq
from kvq import _handle
from conftest import SRC, child_env, run_py


def test_every_code_matches_the_library():
    """errors.py follows include/kvq/error.h: every code has its class, name and message."""
    text = open(os.path.join(SRC, "include", "kvq", "error.h")).read()
    codes = [(int(n), name) for n, name in re.findall(r'X\(\w+, (\d+), "(\w+)"', text)]
    assert len(codes) > 60
    L = _handle.lib()
    for code, name in codes:
        cls = kvq.error_class(code)
        assert cls is not kvq.KvqError and issubclass(cls, kvq.KvqError)
        assert cls.code == code and cls.name == name
        assert L.kvq_errname(code).decode() == name
        e = _handle.error(code)
        assert type(e) is cls and e.message == L.kvq_strerror(code).decode()
        assert e.retryable == bool(L.kvq_error_retryable(code))
    assert kvq.error_class(12345) is kvq.KvqError
    e = _handle.error(12345)
    assert e.code == 12345 and "unknown" in str(e)


def test_exception_carries_code_message_and_detail(db):
    with pytest.raises(kvq.ValueTooLargeError) as ei:
        db.create_queue("jobs").push(b"x" * 100_001)
    e = ei.value
    assert e.code == 2103 and e.name == "value_too_large"
    assert e.message == "value is longer than 100,000 bytes"
    assert "2103" in str(e) and isinstance(e, kvq.KvqError)
    assert not e.retryable and not e.maybe_committed
    assert kvq.NotCommittedError().retryable and kvq.CommitUnknownResultError().maybe_committed
    # kvq's detail: the C library says what was wrong
    with pytest.raises(kvq.InvalidArgumentError) as ei:
        db.create_queue("bad\nname")
    assert ei.value.detail
    assert isinstance(ei.value, ValueError)
    assert issubclass(kvq.NotFoundError, LookupError)


def test_wrong_types(db):
    q = db.create_queue("jobs")
    wq = db.work_queue("jobs")
    for bad in (1, 1.5, None, ["x"], object()):
        with pytest.raises(TypeError):
            q.push(bad)
        with pytest.raises(TypeError):
            wq.push(bad)
    with pytest.raises(TypeError):
        q.push_many([b"ok", 3])
    assert len(q) == 0  # nothing of a refused batch
    with pytest.raises(TypeError):
        q.push_many(5)
    with pytest.raises(TypeError):
        q.push("x", priority="high")
    with pytest.raises(TypeError):
        q.pop("3")
    with pytest.raises(ValueError):
        q.pop(0)
    with pytest.raises(ValueError):
        q.pop(10_001)
    with pytest.raises(TypeError):
        q.push("x", tr="not a transaction")
    with pytest.raises(TypeError):
        db.queue(17)
    with pytest.raises(TypeError):
        db.create_queue(b"bytes-name")
    with pytest.raises(ValueError):
        db.create_queue("q", "stack")
    with pytest.raises(TypeError):
        db.create_queue("q2", lease="long")
    with pytest.raises(ValueError):
        db.create_queue("q3", lease=-1)
    with pytest.raises(TypeError):
        kvq.Database(42)
    with pytest.raises(TypeError):
        db.transact("not callable")
    with pytest.raises(TypeError):
        wq.ack(42)
    with pytest.raises(kvq.InvalidArgumentError):
        wq.ack("not a token")
    with pytest.raises(ValueError):
        wq.receive(timeout=-1)
    with pytest.raises(ValueError):
        wq.receive(lease=0)
    with pytest.raises(ValueError):
        wq.push("x", delay=float("nan"))
    with pytest.raises(ValueError):
        list(q.consume(batch=0))
    with pytest.raises(TypeError):
        db.transact(lambda tr: tr.get(5))
    with pytest.raises(TypeError):
        db.transact(lambda tr: tr.set(b"k", 5))
    with pytest.raises(kvq.KeyOutsideLegalRangeError):
        db.transact(lambda tr: tr.set(b"\xffsys", b"v"))
    with pytest.raises(kvq.KeyTooLargeError):
        db.transact(lambda tr: tr.set(b"k" * 10_001, b"v"))
    with pytest.raises(kvq.InvertedRangeError):
        db.transact(lambda tr: tr.get_range(b"b", b"a"))
    with pytest.raises(ValueError):
        db.transact(lambda tr: tr.get_range(b"a", b"b", limit=-1))
    with pytest.raises(kvq.WrongTypeError):
        db.work_queue(db.create_queue("f", "fifo").name)
    with pytest.raises(kvq.NotFoundError):
        db.work_queue("nope")


def test_closed_handles(url):
    db = kvq.Database(url)
    q = db.create_queue("jobs")
    wq = db.work_queue("jobs")
    wq.push("x")
    m = wq.receive(timeout=0)
    saved = []
    db.transact(lambda tr: saved.append(tr))
    with pytest.raises(kvq.ClosedError):
        saved[0].get(b"k")  # a transaction is over once its function returned
    q.close()
    q.close()  # idempotent
    with pytest.raises(kvq.ClosedError):
        q.push("x")
    with pytest.raises(kvq.ClosedError):
        len(q)
    db.close()
    assert db.closed and wq.closed  # closing the database closed what depends on it
    for call in (lambda: db.queue("jobs"), lambda: db.create_queue("x"), lambda: db.stats(),
                 lambda: db.transact(lambda tr: None), lambda: wq.push("y"), lambda: m.ack(),
                 lambda: wq.receive(timeout=0), lambda: db.engine, lambda: db.queues()):
        with pytest.raises(kvq.ClosedError):
            call()
    assert isinstance(kvq.ClosedError(), ValueError)
    db.close()


def test_close_wakes_a_waiting_consumer(db):
    """close() from another thread ends a consumer asleep on the queue (within WAIT_SLICE)."""
    import threading

    q = db.create_queue("jobs")
    wq = db.work_queue("jobs")
    out = []

    def sleeper():
        out.append(list(wq.consume()))

    t = threading.Thread(target=sleeper)
    t.start()
    wq.close()
    t.join()
    assert out == [[]]

    def waiter():
        try:
            q.wait()
        except kvq.ClosedError as e:
            out.append(e)

    t = threading.Thread(target=waiter)
    t.start()
    q.close()
    t.join()
    # the wait either had not started or was ended by the close: ClosedError both ways
    assert len(out) == 2 and isinstance(out[1], kvq.ClosedError)


def test_missing_library(tmp_path):
    """No crash: import works, the first use says what to do."""
    env = child_env()
    env["KVQ_LIBRARY"] = str(tmp_path / "nowhere" / "libkvq.so")
    p = run_py("import kvq\n"
               "try:\n"
               "    kvq.Database('x')\n"
               "except kvq.LibraryNotFoundError as e:\n"
               "    print('ERR', e)\n", env=env)
    assert p.stdout.startswith("ERR KVQ_LIBRARY=") and "unset it" in p.stdout
    not_a_lib = tmp_path / "libkvq.so"
    not_a_lib.write_text("not a shared object")
    env["KVQ_LIBRARY"] = str(not_a_lib)
    p = run_py("import kvq\n"
               "try:\n"
               "    kvq.library_version()\n"
               "except ImportError as e:\n"
               "    print('ERR', type(e).__name__)\n", env=env)
    assert p.stdout.strip() == "ERR LibraryNotFoundError"
    # another shared object than kvq
    env["KVQ_LIBRARY"] = "libc.so.6"
    p = run_py("import kvq\n"
               "try:\n"
               "    kvq.library_version()\n"
               "except kvq.LibraryNotFoundError as e:\n"
               "    print('ERR', e)\n", env=env)
    assert "is not a kvq library" in p.stdout


def test_no_installed_library_says_what_to_do(monkeypatch):
    """Without KVQ_LIBRARY and with no installed kvq the error names both ways out."""
    from kvq import _lib

    monkeypatch.delenv("KVQ_LIBRARY", raising=False)
    monkeypatch.setattr(_lib, "_lib", None)
    monkeypatch.setattr(_lib, "_candidates", lambda: ["/nonexistent/libkvq.so.0"])
    with pytest.raises(kvq.LibraryNotFoundError) as ei:
        _lib.load()
    assert "cmake --install" in str(ei.value) and "KVQ_LIBRARY" in str(ei.value)
    assert "/nonexistent/libkvq.so.0" in str(ei.value)
