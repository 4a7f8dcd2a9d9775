// A FoundationDB program written for the Node.js binding (the npm package `foundationdb`), run
// on a kvq directory through libkvq_fdb_c.so. Not part of ctest: CI has no npm registry. Run it
// with tests/bindings/run_node.sh, which installs the binding into a scratch directory.
// Exits 0 when every check holds, 1 at the first that does not.
'use strict';
const assert = require('assert');
const fdb = require('foundationdb');

fdb.setAPIVersion(Number(process.env.FDB_API_VERSION || 710));
const db = fdb.open(process.env.KVQ_CLUSTER_FILE);

async function main() {
  await db.set('hello', 'world');
  assert.strictEqual((await db.get('hello')).toString(), 'world');

  await db.doTransaction(async tn => {
    for (let i = 0; i < 50; i++) tn.set('r/' + String(i).padStart(3, '0'), 'v' + i);
  });
  const rows = await db.getRangeAll('r/', 'r0');
  assert.strictEqual(rows.length, 50);
  assert.strictEqual(rows[0][0].toString(), 'r/000');
  const rev = await db.getRangeAll('r/', 'r0', { limit: 7, reverse: true });
  assert.deepStrictEqual(rev.map(kv => kv[0].toString()).slice(0, 2), ['r/049', 'r/048']);
  assert.strictEqual(rev.length, 7);

  // Paged reads: batches, and the iterator streaming mode.
  let batched = 0, iterated = 0;
  await db.doTransaction(async tn => {
    batched = 0;
    for await (const batch of tn.getRangeBatch('r/', 'r0')) batched += batch.length;
  });
  await db.doTransaction(async tn => {
    iterated = 0;
    for await (const kv of tn.getRange('r/', 'r0', { streamingMode: fdb.StreamingMode.Iterator }))
      iterated++;
  });
  assert.strictEqual(batched, 50);
  assert.strictEqual(iterated, 50);

  // Atomic adds from many transactions.
  await Promise.all(Array.from({ length: 20 }, () =>
    db.add('counter', Buffer.from([1, 0, 0, 0, 0, 0, 0, 0]))));
  assert.strictEqual((await db.get('counter')).readBigInt64LE(), 20n);

  // Two read-modify-write transactions on one key: one conflicts, is retried by the binding's
  // loop (on_error), and neither increment is lost.
  let attempts = 0;
  const bump = () => db.doTransaction(async tn => {
    attempts++;
    const v = await tn.get('c');
    await new Promise(r => setTimeout(r, 50));
    tn.set('c', String(Number(v || 0) + 1));
  });
  await Promise.all([bump(), bump()]);
  assert.strictEqual((await db.get('c')).toString(), '2');
  assert.ok(attempts >= 3, 'a conflict was retried');

  // A versionstamped key through the tuple layer, and the stamp the commit reports.
  const q = db.withKeyEncoding(fdb.encoders.tuple);
  const { stamp } = await q.doTransaction(async tn => {
    tn.setVersionstampSuffixedKey(['q'], Buffer.from('item1'));
    return { stamp: tn.getVersionstamp() };
  });
  const vs = await stamp.promise;
  assert.strictEqual(vs.length, 10);
  const items = await db.getRangeAllStartsWith(fdb.tuple.pack(['q']));
  assert.strictEqual(items.length, 1);
  assert.ok(items[0][0].includes(vs), 'the stored key holds the commit\'s versionstamp');

  // A watch fires when another transaction changes the key.
  const w = await db.doTransaction(async tn => tn.watch('wkey'));
  setTimeout(() => db.set('wkey', 'changed'), 100);
  assert.strictEqual(await w.promise, true);

  await db.clearRange('r/', 'r0');
  assert.strictEqual((await db.getRangeAll('r/', 'r0')).length, 0);
  db.close();
}

main().then(() => { console.log('node binding on kvq: all checks passed'); process.exit(0); },
            e => { console.error('node binding on kvq: FAILED:', e); process.exit(1); });
