#!/usr/bin/env python3
"""Python package vs C API: durable push and pop, one at a time and in batches of 100.

    KVQ_LIBRARY=build/libkvq.so python3 bench/python/bench_py.py --c build/bench/bench_pyref \\
        [--rounds 5] [--n 300] [--batches 50] [--storage sqlite,log] [--quick]

Each round runs the C program (bench_pyref, over the same libkvq.so) and then this package on a
fresh database each, the order alternating from round to round; the table gives each side's
median in items per second and the ratio Python / C of the medians. Durable commits (each
single push or pop waits for its sync), one thread, 16-byte values.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import kvq  # noqa: E402

RUNS = ("push 1", "pop 1", "push 100", "pop 100")


def run_py(url, n, batches):
    value = b"v" * 16
    with kvq.Database(url) as db:
        q = db.create_queue("bench")
        push, pop, push_many = q.push, q.pop, q.push_many
        t0 = time.perf_counter()
        for _ in range(n):
            push(value)
        r0 = n / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(n):
            if pop() is None:
                raise SystemExit("pop found the queue empty")
        r1 = n / (time.perf_counter() - t0)
        vals = [value] * 100
        t0 = time.perf_counter()
        for _ in range(batches):
            push_many(vals)
        r2 = batches * 100 / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(batches):
            if len(pop(100)) != 100:
                raise SystemExit("pop(100) came back short")
        r3 = batches * 100 / (time.perf_counter() - t0)
    return [r0, r1, r2, r3]


def run_c(exe, url, n, batches):
    p = subprocess.run([exe, url, str(n), str(batches)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{exe} failed: {p.stderr}")
    return [float(x) for x in p.stdout.split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--c", required=True, help="the bench_pyref program of the same build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=300, help="single pushes and pops per round")
    ap.add_argument("--batches", type=int, default=50, help="batches of 100 per round")
    ap.add_argument("--storage", default="sqlite,log")
    ap.add_argument("--dir", default=None, help="where the databases go (default: a temp dir)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 1 round, tiny counts")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.n, a.batches = 1, 20, 3
    base = tempfile.mkdtemp(prefix="kvq-bench-py-", dir=a.dir)
    print(f"# kvq Python vs C, durable queue, {a.rounds} rounds alternating, "
          f"{a.n} single ops and {a.batches} batches of 100 per round; library "
          f"{kvq.library_path() or os.environ.get('KVQ_LIBRARY')}")
    print(f"{'storage':8} {'run':9} {'C items/s':>11} {'Python items/s':>15} {'Python/C':>9}")
    try:
        for storage in a.storage.split(","):
            res = {"c": [], "py": []}
            for r in range(a.rounds):
                order = ("c", "py") if r % 2 == 0 else ("py", "c")
                for side in order:
                    d = os.path.join(base, f"{storage}-{side}-{r}")
                    url = d if storage == "sqlite" else "log:" + d
                    if side == "c":
                        res["c"].append(run_c(a.c, url, a.n, a.batches))
                    else:
                        res["py"].append(run_py(url, a.n, a.batches))
                    shutil.rmtree(d, ignore_errors=True)
            for i, name in enumerate(RUNS):
                c = statistics.median(x[i] for x in res["c"])
                p = statistics.median(x[i] for x in res["py"])
                print(f"{storage:8} {name:9} {c:11.0f} {p:15.0f} {p / c:8.2f}x")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
