"""Threads, processes, fork, SIGKILL and the GIL."""

import collections
import inspect
import multiprocessing
import os
import signal
import subprocess
import sys
import threading

import pytest

import kvq
from kvq import _handle, _queue, _workq
from conftest import HERE, child_env

HELPER = os.path.join(HERE, "helper.py")


def _call_lines(fn, name):
    """The source lines of fn on which the call of the C function `name` is written."""
    lines, first = inspect.getsourcelines(fn)
    at = [first + i for i, text in enumerate(lines) if name in text]
    assert at, name
    return {at[0], at[0] + 1}


def _wait_until_in_c(thread, fn, name):
    """Returns once `thread` is inside the foreign call `name` made by fn: its innermost Python
    frame is fn, on the line of that call. This loop itself needs the GIL to run."""
    lines = _call_lines(fn, name)
    while True:
        frame = sys._current_frames().get(thread.ident)
        if frame is not None and frame.f_code is fn.__code__ and frame.f_lineno in lines:
            return frame
        if not thread.is_alive():
            pytest.fail("the waiting thread ended before it slept")
        threading.Event().wait(0.001)


@pytest.mark.parametrize("kind", ["work queue", "queue"])
def test_waiting_releases_the_gil(db, monkeypatch, kind):
    """A consumer asleep in kvq (receive or consume) lets other Python threads run."""
    monkeypatch.setattr(_handle, "WAIT_SLICE", 3600.0)  # one long sleep in C, no slices
    q = db.create_queue("jobs")
    wq = db.work_queue("jobs")
    got = []
    if kind == "work queue":
        t = threading.Thread(target=lambda: got.append(wq.receive(timeout=None).value))
        fn, name = _workq.WorkQueue.receive, "kvq_workq_receive_wait("
    else:
        t = threading.Thread(target=lambda: got.append(next(q.consume())))
        fn, name = _queue.Queue._sleep_on, "kvq_watch_wait("
    t.start()
    _wait_until_in_c(t, fn, name)
    # pure Python work in this thread while the other one sleeps inside the C library
    total = sum(i * i for i in range(200_000))
    assert total > 0
    frame = sys._current_frames()[t.ident]
    assert frame.f_code is fn.__code__ and frame.f_lineno in _call_lines(fn, name)
    assert got == []
    q.push("wake up")
    t.join()
    assert got == [b"wake up"]


def test_threads_share_handles_exactly_once(db):
    q = db.create_queue("jobs")
    wq = db.work_queue("jobs")
    n_threads, per = 4, 150
    seen = collections.Counter()
    lock = threading.Lock()

    def producer(p):
        for i in range(0, per, 10):
            q.push_many(f"{p}:{j}" for j in range(i, i + 10))

    def consumer():
        for m in wq.consume(timeout=0.3):
            with m:
                with lock:
                    seen[m.value] += 1

    producers = [threading.Thread(target=producer, args=(p,)) for p in range(n_threads)]
    for t in producers:
        t.start()
    for t in producers:
        t.join()
    consumers = [threading.Thread(target=consumer) for _ in range(n_threads)]
    for t in consumers:
        t.start()
    for t in consumers:
        t.join()
    assert len(seen) == n_threads * per and set(seen.values()) == {1}
    assert wq.stats().acked == n_threads * per and len(q) == 0


def test_four_processes_push_four_consume_exactly_once(url, tmp_path):
    producers, per = 4, 5000
    with kvq.Database(url) as db:
        db.create_queue("jobs")
    env = child_env()
    done = str(tmp_path / "done")
    outs = [str(tmp_path / f"out{i}") for i in range(4)]
    cons = [subprocess.Popen([sys.executable, HELPER, "consume", url, "jobs", o, done], env=env)
            for o in outs]
    pros = [subprocess.Popen([sys.executable, HELPER, "push", url, "jobs", str(p), str(per),
                              "100"], env=env) for p in range(producers)]
    assert [p.wait() for p in pros] == [0] * producers
    open(done, "w").close()
    assert [c.wait() for c in cons] == [0] * 4
    seen = collections.Counter()
    for o in outs:
        with open(o) as f:
            seen.update(f.read().split())
    expected = {f"{p}:{i}" for p in range(producers) for i in range(per)}
    assert set(seen) == expected, "lost or unexpected items"
    dups = [v for v, n in seen.items() if n > 1]
    assert dups == [], "duplicated items"
    with kvq.Database(url) as db:
        assert len(db.queue("jobs")) == 0


def test_consumer_killed_mid_lease_gets_its_item_back_once(db, url):
    db.create_queue("jobs")
    wq = db.work_queue("jobs")
    wq.push("first")
    wq.push("second")
    child = subprocess.Popen([sys.executable, HELPER, "hold", url, "jobs", "1.0"],
                             env=child_env(), stdout=subprocess.PIPE, text=True)
    value, token = child.stdout.readline().split()
    assert value == "first"
    m = wq.receive(timeout=0)  # the other item is not held up
    assert m.value == b"second"
    m.ack()
    with pytest.raises(kvq.NotFoundError):
        wq.receive(timeout=0)  # "first" is leased to the child
    child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    child.stdout.close()
    back = wq.receive(timeout=None)  # sleeps until the dead child's lease ends
    assert (back.value, back.deliveries) == (b"first", 2)
    with pytest.raises(kvq.LeaseExpiredError):
        wq.ack(token)  # the dead consumer's lease cannot settle it any more
    back.ack()
    with pytest.raises(kvq.NotFoundError):
        wq.receive(timeout=0)
    met = wq.stats()
    assert (met.ready, met.inflight, met.acked, met.received) == (0, 0, 2, 3)


def _child_uses_parent_handle(q):
    try:
        q.push("through the parent's handle")
    except kvq.ForkedError:
        os._exit(7)
    os._exit(1)


def _child_opens_its_own(url):
    with kvq.Database(url) as db:
        db.queue("jobs").push("from a child's own handle")


def test_fork(db, url):
    """A handle does not cross fork(): the child gets ForkedError and opens the database
    itself; the parent's handles keep working."""
    q = db.create_queue("jobs")
    q.push("before")
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            try:
                q.push("never")
            except kvq.ForkedError as e:
                assert "fork" in str(e)
                assert q.closed
                q.close()  # drops the parent's objects without touching them
                db.close()
                with kvq.Database(url) as mine:
                    mine.queue("jobs").push("child")
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=_child_uses_parent_handle, args=(q,))
    p.start()
    p.join()
    assert p.exitcode == 7
    p = ctx.Process(target=_child_opens_its_own, args=(url,))
    p.start()
    p.join()
    assert p.exitcode == 0
    assert not q.closed
    assert q.pop(10) == [b"before", b"child", b"from a child's own handle"]


def test_a_threads_pop_buffer_is_freed_with_the_thread(db, monkeypatch):
    """Single pops reuse one C buffer per thread; it is given back to kvq when the thread ends."""
    q = db.create_queue("jobs")
    freed = []
    orig = _handle._Buf.__del__

    def spy(self):
        freed.append(bool(self.buf.data))
        orig(self)

    monkeypatch.setattr(_handle._Buf, "__del__", spy)

    def popper():
        q.push("x" * 1000)
        assert q.pop() == b"x" * 1000
        assert q.peek() is None

    t = threading.Thread(target=popper)
    t.start()
    t.join()
    import gc

    gc.collect()
    assert freed == [True]
