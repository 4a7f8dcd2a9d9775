# A FoundationDB program written for FoundationDB's Python binding, run on a kvq directory
# through libkvq_fdb_c.so. Not part of ctest (it needs FoundationDB's source for the binding):
# tests/bindings/run_python.sh sets it up. Exits non-zero at the first check that fails.
import os
import sys
import threading
import time

sys.path.insert(0, os.environ['FDB_PYTHON_DIR'])
import fdb  # noqa: E402
fdb.api_version(int(os.environ.get('V', '730')))
db = fdb.open(os.environ['KVQ_CLUSTER_FILE'])
db[b'hello'] = b'world'
assert db[b'hello'] == b'world'
@fdb.transactional
def fill(tr):
    for i in range(100):
        tr[fdb.tuple.pack(('r', i))] = b'v%d' % i
fill(db)
r = fdb.tuple.range(('r',))
rows = list(db.get_range(r.start, r.stop))
assert len(rows) == 100 and fdb.tuple.unpack(rows[0].key) == ('r', 0)
rows = db.get_range(r.start, r.stop, limit=5, reverse=True)
assert [fdb.tuple.unpack(kv.key)[1] for kv in rows] == [99, 98, 97, 96, 95]
# key selectors
tr = db.create_transaction()
k = tr.get_key(fdb.KeySelector.first_greater_than(fdb.tuple.pack(('r', 10)))).wait()
assert fdb.tuple.unpack(k) == ('r', 11), fdb.tuple.unpack(k)
tr.cancel()
# atomic add from threads
def adder():
    for _ in range(20):
        db.add(b'counter', (1).to_bytes(8, 'little'))
ts = [threading.Thread(target=adder) for _ in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
assert int.from_bytes(db[b'counter'], 'little') == 80
# conflicting read-modify-write in threads, retried by @transactional (on_error)
@fdb.transactional
def bump(tr):
    v = tr[b'c']
    n = int(v) if v.present() else 0
    time.sleep(0.01)
    tr[b'c'] = str(n + 1).encode()
ts = [threading.Thread(target=lambda: [bump(db) for _ in range(10)]) for _ in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
assert int(db[b'c']) == 40, db[b'c']
# versionstamped key through the tuple layer
@fdb.transactional
def push(tr, v):
    tr.set_versionstamped_key(fdb.tuple.pack_with_versionstamp(('q', fdb.tuple.Versionstamp())), v)
    return tr.get_versionstamp()
vs = push(db, b'item').wait()
items = list(db.get_range_startswith(fdb.tuple.pack(('q',))))
assert len(items) == 1 and fdb.tuple.unpack(items[0].key)[1].tr_version == vs
# directory layer
d = fdb.directory.create_or_open(db, ('app', 'queue'))
db[d.pack((1,))] = b'x'
assert db[d.pack((1,))] == b'x'
assert fdb.directory.list(db, ('app',)) == ['queue']
# watch
@fdb.transactional
def w(tr):
    return tr.watch(b'wkey')
f = w(db)
threading.Timer(0.1, lambda: db.__setitem__(b'wkey', b'x')).start()
f.wait()
# errors
try:
    db[b'\xff/x'] = b'y'
    assert False
except fdb.FDBError as e:
    assert e.code == 2004, e.code
del db[r.start:r.stop]
assert list(db.get_range(r.start, r.stop)) == []
print('python binding on kvq: all checks passed, API', os.environ.get('V', '730'))
