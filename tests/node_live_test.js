'use strict';
// The Node.js client against real replicas (started by node_live_test.py):
// the parts of the API the conformance scenarios do not reach.
//   node tests/node_live_test.js TARGET0 TARGET1 [MULTI_TARGET_WITH_A_DEAD_ADDRESS]
const assert = require('node:assert');
const path = require('path');
const { Client, TurnstileError } = require(path.join(__dirname, '..', 'client', 'node'));

const [t0, t1, multi] = process.argv.slice(2);

/** Resolves with the event's argument, or rejects after ms. */
function waitFor(emitter, event, ms = 15000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${event} within ${ms} ms`)), ms);
    emitter.once(event, (arg) => { clearTimeout(timer); resolve(arg); });
  });
}

const checks = [];
function check(name, fn) { checks.push([name, fn]); }

check('metadata, owner and kind show in describe; list finds the lock', async (a, b) => {
  const hold = await a.acquire('live/meta', { owner: 'alice', metadata: { job: '42' }, waitTimeout: 0 });
  const d = await b.describe('live/meta');
  assert.strictEqual(d.holders.length, 1);
  assert.strictEqual(d.holders[0].owner, 'alice');
  assert.deepStrictEqual(d.holders[0].metadata, { job: '42' });
  assert.strictEqual(d.holders[0].kind, 'exclusive');
  assert.strictEqual(d.holders[0].fencingToken, hold.fencingToken);
  const l = await b.list('live/');
  assert.deepStrictEqual(l.names, ['live/meta']);
  assert.strictEqual(l.truncated, false);
  assert.strictEqual(await hold.release(), true);
  assert.strictEqual(await b.describe('live/meta'), null);
});

check('release by lease id on another replica: the holder gets lost DELETED', async (a, b) => {
  const hold = await a.acquire('live/byid', { waitTimeout: 0 });
  const lost = waitFor(hold, 'lost');
  assert.strictEqual(await b.release(hold.leaseId), true);
  assert.strictEqual((await lost).reason, 'DELETED');
  assert.strictEqual(hold.state, 'lost');
  assert.strictEqual(await b.release(hold.leaseId), false); // already gone: NOT_FOUND
  assert.strictEqual(await b.revoke(hold.leaseId, { reason: 'x' }), false);
});

check('revokeHolders: a waiter asks the holder to let go, who releases', async (a, b) => {
  const holder = await a.acquire('live/rh', { owner: 'old' });
  holder.on('revokeRequested', () => holder.release());
  const asked = waitFor(holder, 'revokeRequested');
  const waiter = await b.acquire('live/rh', { owner: 'new', revokeHolders: true, revokeReason: 'my turn' });
  assert.deepStrictEqual(await asked, { requester: 'new', reason: 'my turn' });
  assert.ok(waiter.fencingToken > holder.fencingToken);
  await waiter.release();
});

check('TTL lease: keepAlive renews it; state and validFor', async (a, b) => {
  const hold = await a.acquire('live/ttl', { ttl: 1000, waitTimeout: 0 });
  assert.ok(hold.validFor > 0 && hold.validFor <= 1000, `validFor ${hold.validFor}`);
  const [st] = await b.keepAlive([hold.leaseId]);
  assert.strictEqual(st.codeName, 'OK');
  assert.ok(st.validFor > 0);
  // An interval of 2.5 TTLs in which nothing may go wrong (the harness's
  // hold_ms): the library renews the lease by itself.
  const trouble = [];
  hold.on('suspended', () => trouble.push('suspended'));
  hold.on('lost', (l) => trouble.push(`lost ${l.reason}`));
  await new Promise((resolve) => setTimeout(resolve, 2500));
  assert.deepStrictEqual(trouble, []);
  assert.strictEqual(hold.state, 'held');
  await hold.release();
  const [gone] = await b.keepAlive([hold.leaseId]);
  assert.strictEqual(gone.codeName, 'NOT_FOUND');
});

check('lockDelay: an involuntary end delays the next grant', async (a, b) => {
  const hold = await a.acquire('live/delay', { lockDelay: 1500, waitTimeout: 0 });
  await b.release(hold.leaseId); // someone else ends it: involuntary
  await waitFor(hold, 'lost');
  const d = await b.describe('live/delay').catch(() => null);
  const start = Date.now();
  const next = await b.acquire('live/delay', { waitTimeout: 10000 });
  const waited = Date.now() - start;
  assert.ok(waited >= 1000, `granted after ${waited} ms (describe: ${JSON.stringify(d && d.delayedUntil)})`);
  await next.release();
});

check('AbortSignal abandons a wait and leaves no waiter behind', async (a, b) => {
  const holder = await a.acquire('live/abort', { waitTimeout: 0 });
  const ac = new AbortController();
  const pending = b.acquire('live/abort', { waitTimeout: 20000, signal: ac.signal });
  await waitFor(pending.hold, 'queued');
  ac.abort();
  await assert.rejects(pending, (e) => e instanceof TurnstileError && e.codeName === 'CANCELLED');
  let d;
  for (let i = 0; i < 100; i++) { // the replica deletes the node once it sees the cancel
    d = await a.describe('live/abort');
    if (d.waiters.length === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 50)); // polling the server: no event to wait on
  }
  assert.deepStrictEqual(d.waiters, []);
  await holder.release();
});

check('semaphore: maxHolders permits, the N+1st waits; describe shows N', async (a, b) => {
  const h1 = await a.acquire('live/sem', { maxHolders: 2, waitTimeout: 0 });
  const h2 = await b.acquire('live/sem', { kind: 'semaphore', maxHolders: 2, waitTimeout: 0 });
  await assert.rejects(a.acquire('live/sem', { maxHolders: 2, waitTimeout: 0 }),
    (e) => e.codeName === 'FAILED_PRECONDITION');
  const d = await a.describe('live/sem');
  assert.strictEqual(d.maxHolders, 2);
  assert.strictEqual(d.holders.length, 2);
  const p3 = b.acquire('live/sem', { maxHolders: 2, waitTimeout: 10000 });
  await waitFor(p3.hold, 'queued');
  await h1.release();
  const h3 = await p3;
  assert.ok(h3.fencingToken > h2.fencingToken);
  await h2.release();
  await h3.release();
});

check('shared holds coexist', async (a, b) => {
  const r1 = await a.acquire('live/rw', { kind: 'shared', waitTimeout: 0 });
  const r2 = await b.acquire('live/rw', { kind: 'shared', waitTimeout: 0 });
  const d = await a.describe('live/rw');
  assert.deepStrictEqual(d.holders.map((h) => h.kind), ['shared', 'shared']);
  await r1.release();
  await r2.release();
});

check('errors carry the gRPC code: INVALID_ARGUMENT names the field', async (a) => {
  await assert.rejects(a.acquire('live/bad', { lockDelay: 61000 }), (e) =>
    e instanceof TurnstileError && e.code === 3 && e.codeName === 'INVALID_ARGUMENT' && /lock_delay/.test(e.message));
  await assert.rejects(a.list('', { limit: 100000 }), (e) => e.codeName === 'INVALID_ARGUMENT');
});

check('a multi-address target with a dead address reaches the live replica', async () => {
  if (!multi) return;
  const c = new Client(multi);
  try {
    const hold = await c.acquire('live/multi', { waitTimeout: 10000 });
    await hold.release();
  } finally {
    c.close();
  }
});

(async () => {
  const a = new Client(t0);
  const b = new Client(t1);
  let failed = 0;
  for (const [name, fn] of checks) {
    try {
      await fn(a, b);
      console.log(`ok   ${name}`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${name}: ${e && e.stack}`);
    }
  }
  a.close();
  b.close();
  console.log(failed ? `FAIL node_live: ${failed} of ${checks.length}` : `PASS node_live (${checks.length} checks)`);
  process.exit(failed ? 1 : 0);
})();
