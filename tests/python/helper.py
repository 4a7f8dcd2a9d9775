"""Child processes of the tests: `python3 helper.py MODE ARGS...` (see each mode below)."""

import os
import sys
import time

import kvq


def push(url, name, producer, count, batch):
    """Pushes count values "producer:i", batch values per transaction."""
    producer, count, batch = int(producer), int(count), int(batch)
    with kvq.Database(url) as db:
        q = db.queue(name)
        for start in range(0, count, batch):
            q.push_many(f"{producer}:{i}" for i in range(start, min(count, start + batch)))


def consume(url, name, out_path, done_path):
    """Pops until done_path exists and the queue is then empty; writes each value to out_path."""
    got = []
    with kvq.Database(url) as db:
        q = db.queue(name)
        while True:
            got.extend(q.consume(batch=100, timeout=0.2))
            if os.path.exists(done_path):
                # every push committed before done_path was made: one more pass takes the rest
                got.extend(q.consume(batch=100, timeout=0))
                break
    with open(out_path, "w") as f:
        f.write("".join(v.decode() + "\n" for v in got))


def hold(url, name, lease):
    """Receives one item with a lease, prints its value and token, and sleeps until killed."""
    with kvq.Database(url) as db:
        wq = db.work_queue(name)
        m = wq.receive(lease=float(lease), timeout=None)
        print(m.value.decode(), m.token, flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    {"push": push, "consume": consume, "hold": hold}[sys.argv[1]](*sys.argv[2:])
