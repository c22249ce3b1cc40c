'use strict';
// The Node.js client's election helpers and acquireAll against real
// replicas (issue 23), started by node_live_test.py:
//   node tests/node_election_live_test.js TARGET0 TARGET1 CAPPED_TARGET PID0
// CAPPED_TARGET runs with --max-wait-timeout 1s; PID0 is replica 0's
// process, sent SIGTERM by the last check (an observer through a
// two-replica target must observe again through the other).
const assert = require('node:assert');
const path = require('path');
const { Client, Election, TurnstileError } = require(path.join(__dirname, '..', 'client', 'node'));

const [t0, t1, capped, pid0] = process.argv.slice(2);
const WITHIN = 15000; // ms: the deadline of every wait for an event

/** Collects an Observation's items; waitFor(pred) resolves with the index
 * of the first item from `start` that satisfies it, or rejects at the
 * deadline. */
class Watcher {
  constructor(obs) {
    this.obs = obs;
    this.items = [];
    this.error = null;
    this._waiters = new Set();
    obs.on('change', (item) => { this.items.push(item); this._poke(); });
    obs.on('error', (e) => { this.error = e; this._poke(); });
  }

  _poke() { for (const w of this._waiters) w(); }

  waitFor(pred, what, start = 0) {
    return new Promise((resolve, reject) => {
      const check = () => {
        for (let i = start; i < this.items.length; i++) {
          if (pred(this.items[i])) { done(); resolve(i); return; }
        }
        if (this.error) { done(); reject(this.error); }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`observer never saw ${what}; saw ${JSON.stringify(this.summary())}`));
      }, WITHIN);
      const done = () => { clearTimeout(timer); this._waiters.delete(check); };
      this._waiters.add(check);
      check();
    });
  }

  summary() {
    return this.items.map((i) => [i.kind, i.leader && [i.leader.value, String(i.leader.fencingToken)]]);
  }

  close() { this.obs.close(); }
}

const leaderIs = (value, token) => (i) => i.kind === 'leader' && i.leader.value === value &&
  (token === undefined || i.leader.fencingToken === token);

async function codeOf(promise) {
  try {
    await promise;
    return 'OK';
  } catch (e) {
    if (!(e instanceof TurnstileError)) throw e;
    return e.codeName;
  }
}

async function waitUntil(pred, what) {
  const deadline = Date.now() + WITHIN;
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20)); // polling Describe: no event to wait on
  }
}

const checks = [];
function check(name, fn) { checks.push([name, fn]); }

check('campaign and observe see the leader; proclaim; stale tokens and released leases are refused', async ({ a, b }) => {
  const name = 'nel/basic';
  const w = new Watcher(b.observe(name));
  try {
    await w.waitFor((i) => i.kind === 'none', 'no leader at first');
    const said = [];
    const el = new Election(a, name, { owner: 'alice', onLeadership: (ok, why) => said.push([ok, why]) });
    const term = await el.campaign('alice:1', { timeout: WITHIN });
    assert.ok(el.isLeader());
    assert.deepStrictEqual(said, [[true, 'ACQUIRED']]);
    const i = await w.waitFor(leaderIs('alice:1', term.fencingToken), 'alice:1');
    assert.strictEqual(w.items[i].leader.owner, 'alice');
    assert.deepStrictEqual(w.items[i].leader.metadata, { value: 'alice:1' });
    assert.strictEqual((await b.leader(name)).fencingToken, term.fencingToken);
    await el.proclaim('alice:2');
    await w.waitFor(leaderIs('alice:2', term.fencingToken), 'the proclaimed value', i);
    const d = await b.describe(name);
    assert.strictEqual(d.holders[0].metadata.value, 'alice:2');
    assert.ok(el.isLeader());
    assert.strictEqual(await codeOf(b.proclaim(term.leaseId, term.fencingToken + 1n, { value: 'x' })), 'FAILED_PRECONDITION');
    assert.strictEqual(await codeOf(b.proclaim(term.leaseId, 0n, { value: 'x' })), 'INVALID_ARGUMENT');
    assert.strictEqual((await b.describe(name)).holders[0].metadata.value, 'alice:2');
    assert.strictEqual(await el.resign(), true);
    assert.deepStrictEqual(said, [[true, 'ACQUIRED'], [false, 'RESIGNED']]);
    await w.waitFor((x) => x.kind === 'none', 'no leader after resign', i);
    assert.strictEqual(await codeOf(b.proclaim(term.leaseId, term.fencingToken, { value: 'x' })), 'NOT_FOUND');
    assert.strictEqual(await codeOf(el.proclaim('late')), 'FAILED_PRECONDITION');
    const el2 = new Election(b, name, { owner: 'bob' });
    const term2 = await el2.campaign('bob:1', { timeout: WITHIN });
    assert.ok(term2.fencingToken > term.fencingToken);
    assert.strictEqual(await codeOf(a.proclaim(term2.leaseId, term.fencingToken, { value: 'x' })), 'FAILED_PRECONDITION');
    await el2.resign();
  } finally {
    w.close();
  }
});

check('resign hands leadership over in queue order, said before the next leads', async ({ a, b, c }) => {
  const name = 'nel/handover';
  const log = [];
  const sayer = (who) => (ok, why) => log.push([who, ok, why]);
  const w = new Watcher(a.observe(name));
  try {
    const first = new Election(a, name, { owner: 'a', onLeadership: sayer('a') });
    const t1 = await first.campaign('a', { timeout: WITHIN });
    const eb = new Election(b, name, { owner: 'b', onLeadership: sayer('b') });
    const pb = eb.campaign('b', { timeout: WITHIN });
    await waitUntil(async () => ((await a.describe(name)) || { waiters: [] }).waiters.length >= 1, 'b to queue');
    const ec = new Election(c, name, { owner: 'c', onLeadership: sayer('c') });
    const pc = ec.campaign('c', { timeout: WITHIN });
    await waitUntil(async () => ((await a.describe(name)) || { waiters: [] }).waiters.length >= 2, 'c to queue');
    await first.resign();
    const t2 = await pb;
    const sb = await w.waitFor(leaderIs('b', t2.fencingToken), 'b leading');
    await eb.resign();
    const t3 = await pc;
    const sc = await w.waitFor(leaderIs('c', t3.fencingToken), 'c leading', sb);
    await ec.resign();
    await w.waitFor((i) => i.kind === 'none', 'no leader at the end', sc);
    assert.deepStrictEqual(log, [['a', true, 'ACQUIRED'], ['a', false, 'RESIGNED'], ['b', true, 'ACQUIRED'],
      ['b', false, 'RESIGNED'], ['c', true, 'ACQUIRED'], ['c', false, 'RESIGNED']]);
    assert.ok(t1.fencingToken < t2.fencingToken && t2.fencingToken < t3.fencingToken);
    assert.deepStrictEqual(w.items.filter((i) => i.leader).map((i) => i.leader.value), ['a', 'b', 'c']);
  } finally {
    w.close();
  }
});

check('a campaign longer than a replica\'s wait limit re-queues invisibly', async ({ a, capped: cp }) => {
  const name = 'nel/capped';
  const holder = new Election(a, name, { owner: 'holder' });
  await holder.campaign('h', { timeout: WITHIN });
  const asked = [];
  let fourth;
  const reachedFourth = new Promise((resolve) => { fourth = resolve; });
  const counting = Object.create(cp);
  counting.acquire = (n, opts) => {
    asked.push(opts.waitTimeout);
    if (asked.length >= 4) fourth();
    return cp.acquire(n, opts);
  };
  const patient = new Election(counting, name, { owner: 'patient' });
  const p = patient.campaign('p', { timeout: WITHIN });
  let failure = null;
  p.catch((e) => { failure = e; });
  // 1: ~15 s, refused (the limit is learnt); 2, 3: 1 s waits that time out; 4: waiting.
  await Promise.race([reachedFourth, new Promise((_, reject) => setTimeout(
    () => reject(new Error(`no 4th attempt: ${JSON.stringify(asked)} ${failure}`)), WITHIN))]);
  await holder.resign();
  const term = await p;
  assert.ok(asked[0] > 1000 && asked.slice(1).every((ms) => ms <= 1000), JSON.stringify(asked));
  const d = await a.describe(name);
  assert.strictEqual(d.holders[0].owner, 'patient');
  assert.strictEqual(d.waiters.length, 0);
  await a.release(term.leaseId);
});

check('acquireAll of overlapping sets from several clients never deadlocks', async ({ a, b, c }) => {
  const sets = [['nmx/a', 'nmx/b', 'nmx/c'], ['nmx/c', 'nmx/a'], ['nmx/b', 'nmx/c'], ['nmx/c', 'nmx/b', 'nmx/a']];
  const clients = [a, b, c, a];
  const waitTimeout = 8000;
  const holding = new Map();
  const problems = [];
  const rounds = sets.map(() => 0);
  await Promise.all(sets.map(async (names, k) => {
    for (let r = 0; r < 6; r++) {
      const started = Date.now();
      let set;
      try {
        set = await clients[k].acquireAll(names, { waitTimeout, owner: `w${k}` });
      } catch (e) {
        problems.push(`worker ${k}: ${e.message} after ${Date.now() - started} ms`);
        return;
      }
      if (Date.now() - started > waitTimeout + 2000) problems.push(`worker ${k} took ${Date.now() - started} ms`);
      for (const n of set.holds.keys()) {
        if (holding.has(n)) problems.push(`${n} held by ${holding.get(n)} and ${k}`);
        holding.set(n, k);
      }
      for (const [n, token] of set.fencingTokens) { // work under the locks: describe shows us
        const d = await clients[k].describe(n);
        if (d.holders.length !== 1 || d.holders[0].fencingToken !== token) problems.push(`${n}: not ours`);
      }
      for (const n of set.holds.keys()) holding.delete(n);
      await set.release();
      rounds[k] += 1;
    }
  }));
  assert.deepStrictEqual(problems, []);
  assert.deepStrictEqual(rounds, [6, 6, 6, 6]);
  for (const n of ['nmx/a', 'nmx/b', 'nmx/c']) assert.strictEqual(await b.describe(n), null);
});

check('a failed acquireAll leaves none of its locks held; losing one loses the set', async ({ a, b }) => {
  const blocker = await b.acquire('nmf/2', { waitTimeout: 0, owner: 'blocker' });
  try {
    const started = Date.now();
    assert.strictEqual(await codeOf(a.acquireAll(['nmf/3', 'nmf/2', 'nmf/1'], { waitTimeout: 1000 })), 'DEADLINE_EXCEEDED');
    assert.ok(Date.now() - started < 4000, `took ${Date.now() - started} ms`);
    assert.strictEqual(await codeOf(a.acquireAll(['nmf/1', 'nmf/2', 'nmf/3'], { waitTimeout: 0 })), 'FAILED_PRECONDITION');
    assert.strictEqual(await codeOf(a.acquireAll(['nmf/1', 'nmf/1'])), 'INVALID_ARGUMENT');
    assert.strictEqual(await b.describe('nmf/1'), null);
    assert.strictEqual(await b.describe('nmf/3'), null);
    const d = await b.describe('nmf/2');
    assert.deepStrictEqual(d.holders.map((h) => h.owner), ['blocker']);
    assert.deepStrictEqual(d.waiters, []);
  } finally {
    await blocker.release();
  }
  const set = await a.acquireAll(['nml/1', 'nml/2'], { waitTimeout: 5000 });
  const lost = new Promise((resolve) => set.once('lost', resolve));
  await b.release(set.leaseIds.get('nml/1'));
  assert.deepStrictEqual(await lost, { name: 'nml/1', reason: 'DELETED' });
  assert.strictEqual(set.state, 'lost');
  await waitUntil(async () => (await b.describe('nml/2')) === null, 'nml/2 to be let go');
});

check('an observer re-observes when its replica drains (last: stops replica 0)', async ({ b }) => {
  const name = 'nel/drain';
  const el = new Election(b, name, { owner: 'stays' });
  const term = await el.campaign('v', { timeout: WITHIN });
  const viaBoth = new Client(`ipv4:${t0},${t1}`);
  const w = new Watcher(viaBoth.observe(name));
  try {
    const i = await w.waitFor(leaderIs('v', term.fencingToken), 'the leader');
    process.kill(Number(pid0), 'SIGTERM'); // drains: the Observe stream ends UNAVAILABLE
    const j = await w.waitFor((x) => x.kind === 'unknown', 'unknown while observing again', i);
    await w.waitFor(leaderIs('v', term.fencingToken), 'the leader again', j);
    assert.ok(w.obs.reopened >= 1);
  } finally {
    w.close();
    viaBoth.close();
  }
  assert.ok(el.isLeader());
  await el.resign();
});

(async () => {
  const a = new Client(t0);
  const b = new Client(t1);
  const c = new Client(t1, { channelOptions: { 'grpc.use_local_subchannel_pool': 1 } });
  const cp = new Client(capped);
  let failed = 0;
  const started = Date.now();
  for (const [name, fn] of checks) {
    const t = Date.now();
    try {
      await fn({ a, b, c, capped: cp });
      console.log(`ok   ${name} (${Date.now() - t} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${name}: ${e && e.stack}`);
    }
  }
  for (const cl of [a, b, c, cp]) cl.close();
  console.log(failed ? `FAIL node_election_live: ${failed} of ${checks.length}`
    : `PASS node_election_live (${checks.length} checks, ${Date.now() - started} ms)`);
  process.exit(failed ? 1 : 0);
})();
