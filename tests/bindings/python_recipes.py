# kvq's FIFO and priority queues shared with a program that uses FoundationDB's queue recipes
# through FoundationDB's own Python binding, on one kvq directory (the binding through
# libkvq_fdb_c.so, kvq through its command). The recipe side is written here from the recipes'
# description (docs/queues.md): FIFO items at sub + (index, 20 random bytes), the index 1 + the
# last one read with a snapshot read; priority items at sub + (priority, count, 20 random bytes);
# a dequeue is a plain range read of the first item and a clear. Checks that each side pops
# what the other pushed, in order, and that the recipe's range [sub + 00, sub + FF) holds only
# items (kvq's bookkeeping, its push counter included, lies at sub + FF + ...). Not part of ctest
# (it needs FoundationDB's source for the binding): tests/bindings/run_python.sh runs it.
import os
import subprocess
import sys

sys.path.insert(0, os.environ['FDB_PYTHON_DIR'])
import fdb  # noqa: E402
fdb.api_version(int(os.environ.get('V', '730')))
db = fdb.open(os.environ['KVQ_CLUSTER_FILE'])
kvq_dir = open(os.environ['KVQ_CLUSTER_FILE']).read().strip()[len('kvq:'):]


def kvq(*args, stdin=None):
    r = subprocess.run([os.environ['KVQ_CLI'], '--db', kvq_dir] + list(args), input=stdin,
                       capture_output=True, timeout=60)
    if r.returncode not in (0, 1):
        sys.exit('kvq %s: exit %d: %s' % (' '.join(args), r.returncode, r.stderr.decode()))
    return r.returncode, r.stdout.decode().splitlines()


@fdb.transactional
def recipe_fifo_push(tr, sub, value):
    last = list(tr.snapshot.get_range(sub.range().start, sub.range().stop, limit=1,
                                      reverse=True))
    index = sub.unpack(last[0].key)[0] + 1 if last else 1
    tr[sub.pack((index, os.urandom(20)))] = value


@fdb.transactional
def recipe_prio_push(tr, sub, value, priority):
    r = sub.range((priority,))
    last = list(tr.snapshot.get_range(r.start, r.stop, limit=1, reverse=True))
    count = sub.unpack(last[0].key)[1] + 1 if last else 0
    tr[sub.pack((priority, count, os.urandom(20)))] = value


@fdb.transactional
def recipe_pop(tr, sub):
    for kv in tr.get_range(sub.range().start, sub.range().stop, limit=1):
        del tr[kv.key]
        return kv.value
    return None


@fdb.transactional
def recipe_keys(tr, sub):
    return [kv.key for kv in tr.get_range(sub.range().start, sub.range().stop)]


# FIFO: kvq pushes, the recipe pops, the recipe pushes, kvq pops.
jobs = fdb.Subspace(('jobs',))
kvq('create', 'jobs', '--type', 'fifo')
kvq('push', 'jobs', 'a', 'b', 'c')
keys = recipe_keys(db, jobs)
assert len(keys) == 3, keys
assert all(isinstance(jobs.unpack(k)[0], int) for k in keys), keys
assert recipe_pop(db, jobs) == b'a'
recipe_fifo_push(db, jobs, b'd')
recipe_fifo_push(db, jobs, b'e')
rc, out = kvq('pop', 'jobs', '-n', '3')
assert rc == 0 and out == ['b', 'c', 'd'], (rc, out)
assert recipe_pop(db, jobs) == b'e'
assert recipe_pop(db, jobs) is None
rc, out = kvq('pop', 'jobs')
assert rc == 1, (rc, out)  # empty for kvq too
# kvq's bookkeeping of the queue exists (its push counter), outside the recipe's range.
book = list(db.get_range(jobs.key() + b'\xff', jobs.key() + b'\xff\xff'))
assert any(kv.key == jobs.key() + b'\xff' + fdb.tuple.pack(('npush',)) for kv in book), book
assert recipe_keys(db, jobs) == []

# Priority: the recipe pushes at several priorities, kvq pops the lowest first; then kvq pushes
# and the recipe pops.
pq = fdb.Subspace(('prio',))
kvq('create', 'prio', '--type', 'priority')
recipe_prio_push(db, pq, b'p5', 5)
recipe_prio_push(db, pq, b'p1-first', 1)
recipe_prio_push(db, pq, b'p1-second', 1)
rc, out = kvq('pop', 'prio', '-n', '3')
assert rc == 0 and out == ['p1-first', 'p1-second', 'p5'], (rc, out)
kvq('push', 'prio', '--priority', '3', 'k3')
kvq('push', 'prio', '--priority', '2', 'k2')
assert recipe_pop(db, pq) == b'k2'
assert recipe_pop(db, pq) == b'k3'
assert recipe_pop(db, pq) is None
print('python recipes and kvq: ok')
