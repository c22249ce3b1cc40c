'use strict';
// Unit tests of the election helpers and acquireAll without a server: the
// canonical order, refused duplicates, the single deadline, release of what
// was taken when a set cannot be had, the campaign's re-queue loop against
// injected failures and an injected clock, what 'leadership' says and when,
// and Observe's re-observing stream, against a fake LockService stub.
const test = require('node:test');
const assert = require('node:assert');
const { EventEmitter } = require('events');

const {
  Client, TurnstileError, Status, Election, requeueUntil, acquireAll, canonicalOrder,
} = require('..');

// ---- Test doubles ----------------------------------------------------------

class FakeClock {
  constructor() {
    this.t = 1000;
    this.timers = [];
    this.slept = [];
  }

  now() { return this.t; }

  setTimeout(fn, ms) {
    const h = { at: this.t + Math.max(ms, 0), fn, ms };
    this.timers.push(h);
    return h;
  }

  clearTimeout(h) { this.timers = this.timers.filter((x) => x !== h); }

  async advance(ms) {
    const end = this.t + ms;
    for (;;) {
      await flush();
      const due = this.timers.filter((x) => x.at <= end).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      this.timers = this.timers.filter((x) => x !== due);
      this.t = due.at;
      due.fn();
    }
    this.t = end;
    await flush();
  }
}

async function flush() {
  for (let i = 0; i < 8; i++) await new Promise((r) => setImmediate(r));
}

class FakeCall extends EventEmitter {
  constructor(onWrite) {
    super();
    this.written = [];
    this.cancelled = false;
    this.finished = false;
    this._onWrite = onWrite;
  }

  write(msg) {
    this.written.push(msg);
    if (this._onWrite) this._onWrite(this, msg);
  }

  end() {}

  cancel() {
    this.cancelled = true;
    this.finish(Status.CANCELLED, 'Cancelled on client');
  }

  send(ev) { this.emit('data', ev); }

  finish(code, details = '') {
    if (this.finished) return;
    this.finished = true;
    if (code !== Status.OK) this.emit('error', Object.assign(new Error(details), { code, details }));
    this.emit('status', { code, details });
  }
}

const dur = (ms) => ({ seconds: String(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1e6 });

/** A LockService whose Acquire streams play `acquireScript` (one entry per
 * call: a status code to end with, or 'grant'), answer a release with
 * RELEASED, and whose Observe streams are kept for the test to drive. */
class FakeStub {
  constructor() {
    this.calls = [];
    this.observes = [];
    this.unary = [];
    this.acquireScript = [];
    this.log = [];
    this.unaryResult = {}; // method -> error status to answer
  }

  Acquire() {
    const index = this.calls.length;
    const call = new FakeCall((c, msg) => {
      if (msg.open) {
        c.openName = msg.open.name;
        this.log.push(['open', msg.open.name, Number(msg.open.waitTimeout.seconds) * 1000 +
          msg.open.waitTimeout.nanos / 1e6]);
        const what = this.acquireScript[index] === undefined ? 'grant' : this.acquireScript[index];
        setImmediate(() => {
          if (what === 'grant') {
            c.send({
              type: 'ACQUIRED',
              acquired: { leaseId: `lease-${index}`, fencingToken: String(100 + index), sessionTimeout: dur(4000) },
            });
          } else if (what !== 'wait') {
            c.finish(what, 'scripted');
          }
        });
      }
      if (msg.release) {
        this.log.push(['release', c.openName]);
        setImmediate(() => { c.send({ type: 'RELEASED' }); c.finish(Status.OK); });
      }
    });
    this.calls.push(call);
    return call;
  }

  Observe(req) {
    const call = new FakeCall();
    call.request = req;
    this.observes.push(call);
    return call;
  }

  Proclaim(req, opts, cb) {
    this.unary.push(['Proclaim', req]);
    const err = this.unaryResult.Proclaim;
    setImmediate(() => (err ? cb(Object.assign(new Error(err.details), err)) : cb(null, {})));
  }
}

function setup() {
  const clock = new FakeClock();
  const stub = new FakeStub();
  const client = new Client('fake:1', { stub, clock });
  return { clock, stub, client };
}

// ---- canonical order and acquireAll with a fake acquire ---------------------

test('canonicalOrder sorts by UTF-8 bytes, not UTF-16 units', () => {
  const lockChar = '\u{1F512}'; // beyond the BMP: a surrogate pair in UTF-16
  const fullwidth = '\uff5e';
  assert.ok(lockChar < fullwidth, 'JavaScript compares UTF-16 units');
  assert.deepStrictEqual(canonicalOrder([lockChar, fullwidth, 'b', 'a/10', 'a/2', 'Z', '\u00e9']),
    ['Z', 'a/10', 'a/2', 'b', '\u00e9', fullwidth, lockChar]);
});

test('bad sets are INVALID_ARGUMENT before any acquire', async () => {
  for (const [names, word] of [[['x', 'y', 'x'], 'twice'], [[], 'at least one'], ['abc', 'array'],
    [['ok', ''], 'non-empty'], [['ok', 3], 'non-empty']]) {
    const calls = [];
    await assert.rejects(acquireAll((n) => { calls.push(n); }, names, { waitTimeout: 100 }), (e) => {
      assert.strictEqual(e.code, Status.INVALID_ARGUMENT);
      assert.match(e.details, new RegExp(word));
      return true;
    });
    assert.deepStrictEqual(calls, []);
  }
});

class FakeHold extends EventEmitter {
  constructor(name, token, log) {
    super();
    this.name = name;
    this.state = 'held';
    this.fencingToken = BigInt(token);
    this.leaseId = `lease-${name}`;
    this._log = log;
  }

  become(state, event, info) {
    this.state = state;
    this.emit(event, info);
  }

  async release() {
    this._log.push(['release', this.name]);
    const ok = this.state === 'held';
    if (this.state === 'held' || this.state === 'suspended') this.become('released', 'released');
    return ok;
  }
}

function fakeAcquirer({ clock, cost = 0, fail = {}, during = {} } = {}) {
  const log = [];
  const holds = {};
  const acquire = async (name, wait) => {
    log.push(['acquire', name, wait]);
    if (during[name]) during[name](holds);
    if (clock) clock.t += cost;
    if (fail[name]) throw fail[name];
    holds[name] = new FakeHold(name, 100 + Object.keys(holds).length, log);
    return holds[name];
  };
  return { acquire, log, holds };
}

test('acquireAll takes the names in canonical order, each with its own token, and releases all', async () => {
  const f = fakeAcquirer();
  const set = await acquireAll(f.acquire, ['c', 'a', 'b'], { waitTimeout: 5000, clock: new FakeClock() });
  assert.deepStrictEqual(f.log, [['acquire', 'a', 5000], ['acquire', 'b', 5000], ['acquire', 'c', 5000]]);
  assert.deepStrictEqual([...set.fencingTokens], [['a', 100n], ['b', 101n], ['c', 102n]]);
  assert.strictEqual(set.state, 'held');
  assert.strictEqual(await set.release(), true);
  assert.deepStrictEqual(f.log.slice(3), [['release', 'c'], ['release', 'b'], ['release', 'a']]);
  assert.strictEqual(set.state, 'released');
});

test('a failure on the third name releases the first two', async () => {
  const f = fakeAcquirer({ fail: { c: new TurnstileError(Status.DEADLINE_EXCEEDED, 'timed out') } });
  await assert.rejects(acquireAll(f.acquire, ['d', 'c', 'b', 'a'], { waitTimeout: 5000, clock: new FakeClock() }),
    (e) => e.code === Status.DEADLINE_EXCEEDED);
  assert.deepStrictEqual(f.log, [['acquire', 'a', 5000], ['acquire', 'b', 5000], ['acquire', 'c', 5000],
    ['release', 'b'], ['release', 'a']]);
});

test('one deadline for the whole set', async () => {
  let clock = new FakeClock();
  let f = fakeAcquirer({ clock, cost: 1500 });
  await acquireAll(f.acquire, ['a', 'b', 'c'], { waitTimeout: 5000, clock });
  assert.deepStrictEqual(f.log.map((x) => x[2]), [5000, 3500, 2000]);
  clock = new FakeClock();
  f = fakeAcquirer({ clock, cost: 2500 });
  await assert.rejects(acquireAll(f.acquire, ['a', 'b', 'c'], { waitTimeout: 5000, clock }),
    (e) => e.code === Status.DEADLINE_EXCEEDED);
  assert.deepStrictEqual(f.log, [['acquire', 'a', 5000], ['acquire', 'b', 2500], ['release', 'b'], ['release', 'a']]);
});

test('try-once tries each name once', async () => {
  const f = fakeAcquirer({ fail: { b: new TurnstileError(Status.FAILED_PRECONDITION, 'held') } });
  await assert.rejects(acquireAll(f.acquire, ['b', 'a', 'c'], { waitTimeout: 0 }),
    (e) => e.code === Status.FAILED_PRECONDITION);
  assert.deepStrictEqual(f.log, [['acquire', 'a', 0], ['acquire', 'b', 0], ['release', 'a']]);
});

test('a lock lost while taking the others aborts the set', async () => {
  const f = fakeAcquirer({ during: { b: (holds) => holds.a.become('lost', 'lost', { reason: 'SESSION_EXPIRED' }) } });
  await assert.rejects(acquireAll(f.acquire, ['a', 'b', 'c'], { waitTimeout: 5000, clock: new FakeClock() }), (e) => {
    assert.strictEqual(e.code, Status.ABORTED);
    assert.match(e.details, /"a" was lost \(SESSION_EXPIRED\)/);
    return true;
  });
  assert.ok(!f.log.some((x) => x[0] === 'acquire' && x[1] === 'c'));
  assert.strictEqual(f.holds.b.state, 'released');
});

test('the set is suspended while any is in doubt and lost when any is lost', async () => {
  const f = fakeAcquirer();
  const set = await acquireAll(f.acquire, ['a', 'b', 'c'], { waitTimeout: 5000, clock: new FakeClock() });
  const seen = [];
  for (const ev of ['suspended', 'resumed', 'lost']) set.on(ev, (i) => seen.push([ev, i.name, i.reason]));
  f.holds.b.become('suspended', 'suspended', { byWatchdog: false });
  assert.strictEqual(set.held, false);
  f.holds.c.become('suspended', 'suspended', { byWatchdog: true });
  f.holds.b.become('held', 'resumed');
  assert.strictEqual(set.state, 'suspended');
  f.holds.c.become('held', 'resumed');
  assert.strictEqual(set.state, 'held');
  f.holds.a.become('lost', 'lost', { reason: 'DELETED' });
  assert.strictEqual(set.state, 'lost');
  await flush();
  assert.deepStrictEqual(seen, [['suspended', 'b', 'SUSPENDED'], ['resumed', 'c', 'RESUMED'], ['lost', 'a', 'DELETED']]);
  assert.strictEqual(f.holds.b.state, 'released'); // the others are let go
  assert.strictEqual(f.holds.c.state, 'released');
  assert.strictEqual(await set.release(), false);
});

test('Client.acquireAll over real Holds: a refusal on the third releases the first two', async () => {
  const { stub, client } = setup();
  stub.acquireScript = ['grant', 'grant', Status.FAILED_PRECONDITION];
  await assert.rejects(client.acquireAll(['n/3', 'n/1', 'n/2'], { waitTimeout: 0 }),
    (e) => e.code === Status.FAILED_PRECONDITION);
  assert.deepStrictEqual(stub.log.filter((x) => x[0] === 'open').map((x) => [x[1], x[2]]),
    [['n/1', 0], ['n/2', 0], ['n/3', 0]]);
  assert.deepStrictEqual(stub.calls.map((c) => c.written.some((m) => m.release)), [true, true, false]);
});

// ---- the campaign's re-queue loop ------------------------------------------

/** attempt(wait) playing `script` entries [ms it takes, result or error]. */
function scripted(clock, script) {
  const asked = [];
  const attempt = async (wait) => {
    asked.push(wait);
    const [took, result] = script.shift();
    clock.t += took;
    if (result instanceof Error) throw result;
    return result;
  };
  return { attempt, asked };
}

const E = (code, details = 'x') => new TurnstileError(code, details);

/** Advances the fake clock until `promise` settles; its outcome. */
async function run(clock, promise) {
  let outcome = null;
  promise.then((value) => { outcome = { value }; }, (error) => { outcome = { error }; });
  while (outcome === null) await clock.advance(10);
  if ('error' in outcome) throw outcome.error;
  return outcome.value;
}

test('requeue: a wait capped by the replica is queued again at once', async () => {
  const clock = new FakeClock();
  const { attempt, asked } = scripted(clock, [[30000, E(Status.DEADLINE_EXCEEDED)], [30000, E(Status.DEADLINE_EXCEEDED)], [5000, 'hold']]);
  assert.strictEqual(await requeueUntil(100000, attempt, { attemptWait: 30000, clock }), 'hold');
  assert.deepStrictEqual(asked, [30000, 30000, 30000]);
  assert.strictEqual(clock.timers.length, 0);
});

test('requeue: the caller\'s own timeout is DEADLINE_EXCEEDED', async () => {
  const clock = new FakeClock();
  const { attempt, asked } = scripted(clock, [[30000, E(Status.DEADLINE_EXCEEDED)], [20000, E(Status.DEADLINE_EXCEEDED)]]);
  await assert.rejects(requeueUntil(50000, attempt, { attemptWait: 30000, clock }),
    (e) => e.code === Status.DEADLINE_EXCEEDED && /not leader within 50000 ms/.test(e.details));
  assert.deepStrictEqual(asked, [30000, 20000]);
});

test('requeue: busy, unavailable and cancelled back off; the end is DEADLINE_EXCEEDED', async () => {
  let clock = new FakeClock();
  let s = scripted(clock, [[0, E(Status.RESOURCE_EXHAUSTED)], [0, E(Status.UNAVAILABLE)], [0, E(Status.CANCELLED)], [0, 'hold']]);
  const t0 = clock.now();
  assert.strictEqual(await run(clock, requeueUntil(10000, s.attempt, { clock })), 'hold');
  assert.ok(clock.now() - t0 >= 350 && clock.now() - t0 < 400, `backed off ${clock.now() - t0} ms`);
  clock = new FakeClock();
  s = scripted(clock, Array.from({ length: 30 }, () => [0, E(Status.UNAVAILABLE, 'no session')]));
  await assert.rejects(run(clock, requeueUntil(1000, s.attempt, { clock })),
    (e) => e.code === Status.DEADLINE_EXCEEDED && /UNAVAILABLE: no session/.test(e.details));
  assert.ok(clock.now() <= 2000 + 20);
});

test('requeue: the replica\'s wait limit is learnt from its INVALID_ARGUMENT', async () => {
  const clock = new FakeClock();
  const { attempt, asked } = scripted(clock, [
    [0, E(Status.INVALID_ARGUMENT, 'wait_timeout is 3600000ms; it must be 0..2000ms')],
    [2000, E(Status.DEADLINE_EXCEEDED)], [1000, 'hold']]);
  assert.strictEqual(await requeueUntil(null, attempt, { clock }), 'hold');
  assert.deepStrictEqual(asked, [3600000, 2000, 2000]);
});

test('requeue: bad input, permission and other codes reject as they came', async () => {
  for (const err of [E(Status.INVALID_ARGUMENT, 'metadata value for "value" is 300 bytes'),
    E(Status.PERMISSION_DENIED, 'policy'), E(Status.FAILED_PRECONDITION, 'semaphore ahead'),
    E(Status.INVALID_ARGUMENT, 'wait_timeout is 5ms; it must be 0..9000ms')]) {
    const clock = new FakeClock();
    const { attempt, asked } = scripted(clock, [[0, err]]);
    await assert.rejects(requeueUntil(5000, attempt, { clock }), (e) => e === err);
    assert.strictEqual(asked.length, 1);
  }
});

// ---- Election over real Holds on the fake stub ------------------------------

async function leading(opts = {}) {
  const env = setup();
  const said = [];
  const election = new Election(env.client, 'jobs/leader', {
    owner: 'me', metadata: { zone: 'a', value: 'ignored' }, onLeadership: (ok, why) => said.push([ok, why]), ...opts,
  });
  const term = await election.campaign('host-1:80', { timeout: 30000 });
  return { ...env, said, election, term };
}

test('campaign acquires with the value and says leader', async () => {
  const { stub, said, election, term } = await leading();
  const open = stub.calls[0].written[0].open;
  assert.deepStrictEqual(open.metadata, { zone: 'a', value: 'host-1:80' });
  assert.strictEqual(open.owner, 'me');
  assert.strictEqual(open.kind, 'LOCK_KIND_EXCLUSIVE');
  assert.deepStrictEqual([term.value, term.fencingToken, term.leaseId], ['host-1:80', 100n, 'lease-0']);
  assert.strictEqual(election.isLeader(), true);
  assert.deepStrictEqual(said, [[true, 'ACQUIRED']]);
  const again = await election.campaign('other');
  assert.strictEqual(again.fencingToken, 100n);
  assert.strictEqual(stub.calls.length, 1);
});

test('campaign re-queues invisibly through busy and unavailable replicas', async () => {
  const env = setup();
  env.client.retryUnavailable = false; // the election's own loop, not acquire's
  env.stub.acquireScript = [Status.UNAVAILABLE, Status.RESOURCE_EXHAUSTED, 'grant'];
  const said = [];
  const election = new Election(env.client, 'L', { onLeadership: (ok, why) => said.push([ok, why]) });
  const term = await run(env.clock, election.campaign('v', { timeout: 10000 }));
  assert.strictEqual(term.fencingToken, 102n);
  assert.strictEqual(env.stub.calls.length, 3);
  assert.deepStrictEqual(said, [[true, 'ACQUIRED']]);
});

test('campaign rejects on its own timeout and on bad input', async () => {
  const env = setup();
  env.stub.acquireScript = Array.from({ length: 100 }, () => Status.RESOURCE_EXHAUSTED);
  const election = new Election(env.client, 'L');
  await assert.rejects(run(env.clock, election.campaign('v', { timeout: 1000 })),
    (e) => e.code === Status.DEADLINE_EXCEEDED);
  for (const [v, o] of [[null, {}], ['v', { timeout: 0 }], ['v', { timeout: -5 }]]) {
    await assert.rejects(election.campaign(v, o), (e) => e.code === Status.INVALID_ARGUMENT);
  }
  assert.throws(() => new Election(env.client, ''), (e) => e.code === Status.INVALID_ARGUMENT);
  assert.strictEqual(election.isLeader(), false);
});

test('doubt, resume and loss are said at once', async () => {
  const { stub, said, election } = await leading();
  const call = stub.calls[0];
  call.send({ type: 'SUSPENDED', suspended: { safeFor: dur(2000) } });
  assert.strictEqual(election.isLeader(), false);
  call.send({ type: 'RESUMED' });
  assert.strictEqual(election.isLeader(), true);
  call.send({ type: 'LOST', lost: { reason: 'SESSION_EXPIRED' } });
  assert.strictEqual(election.isLeader(), false);
  assert.deepStrictEqual(said, [[true, 'ACQUIRED'], [false, 'SUSPENDED'], [true, 'RESUMED'], [false, 'SESSION_EXPIRED']]);
});

test('the watchdog\'s doubt is said as IN_DOUBT; a campaign meanwhile does not queue again', async () => {
  const env = setup();
  env.stub.Acquire = ((orig) => function acquire() {
    const call = orig.call(env.stub);
    const write = call.write.bind(call);
    call.write = (msg) => {
      if (!msg.open) return write(msg);
      call.written.push(msg);
      setImmediate(() => call.send({
        type: 'ACQUIRED',
        acquired: { leaseId: 'l', fencingToken: '7', sessionTimeout: dur(4000), safeFor: dur(3000), refreshWithin: dur(2000) },
      }));
    };
    return call;
  })(env.stub.Acquire);
  const said = [];
  const election = new Election(env.client, 'L', { onLeadership: (ok, why) => said.push([ok, why, env.clock.now()]) });
  const term = await election.campaign('v', { timeout: 5000 });
  const t0 = env.clock.now();
  await env.clock.advance(2000);
  assert.strictEqual(election.isLeader(), false);
  assert.strictEqual((await election.campaign('v', { timeout: 5000 })).fencingToken, term.fencingToken);
  assert.strictEqual(env.stub.calls.length, 1);
  env.stub.calls[0].send({ type: 'STILL_HELD', stillHeld: { safeFor: dur(3000), refreshWithin: dur(2000) } });
  await env.clock.advance(5000);
  assert.deepStrictEqual(said.map(([ok, why, at]) => [ok, why, at - t0]), [[true, 'ACQUIRED', 0], [false, 'IN_DOUBT', 2000],
    [true, 'RESUMED', 2000], [false, 'IN_DOUBT', 4000], [false, 'REFRESH_OVERDUE', 5000]]);
  assert.strictEqual(env.stub.calls[0].cancelled, true);
});

test('resign says not leader before the release is sent', async () => {
  const { stub, said, election } = await leading();
  const call = stub.calls[0];
  const origWrite = call.write.bind(call);
  const saidAtRelease = [];
  call.write = (msg) => { if (msg.release) saidAtRelease.push(said.slice()); origWrite(msg); };
  assert.strictEqual(await election.resign(), true);
  assert.deepStrictEqual(saidAtRelease, [[[true, 'ACQUIRED'], [false, 'RESIGNED']]]);
  assert.deepStrictEqual(said, [[true, 'ACQUIRED'], [false, 'RESIGNED']]); // RELEASED not said again
  assert.strictEqual(await election.resign(), false);
});

test('REVOKE_REQUESTED resigns unless told not to', async () => {
  let env = await leading();
  env.stub.calls[0].send({ type: 'REVOKE_REQUESTED', revokeRequested: { requester: 'ops', reason: 'move' } });
  await flush();
  assert.deepStrictEqual(env.said, [[true, 'ACQUIRED'], [false, 'RESIGNED']]);
  assert.ok(env.stub.calls[0].written.some((m) => m.release));
  env = await leading({ resignOnRevoke: false });
  env.stub.calls[0].send({ type: 'REVOKE_REQUESTED', revokeRequested: { requester: 'ops', reason: 'move' } });
  await flush();
  assert.strictEqual(env.election.isLeader(), true);
  assert.ok(!env.stub.calls[0].written.some((m) => m.release));
});

test('proclaim sends lease, token and value; without a term it is refused', async () => {
  const env = setup();
  const early = new Election(env.client, 'L');
  await assert.rejects(early.proclaim('x'), (e) => e.code === Status.FAILED_PRECONDITION);
  assert.strictEqual(env.stub.unary.length, 0);
  const { stub, election } = await leading();
  await election.proclaim('v2');
  assert.deepStrictEqual(stub.unary, [['Proclaim', { leaseId: 'lease-0', fencingToken: '100', metadata: { zone: 'a', value: 'v2' } }]]);
  assert.strictEqual(election.leadership.value, 'v2');
  stub.unaryResult.Proclaim = { code: Status.NOT_FOUND, details: 'lease gone' };
  await assert.rejects(election.proclaim('v3'), (e) => e.code === Status.NOT_FOUND);
  assert.strictEqual(election.leadership.value, 'v2');
});

// ---- Observe ----------------------------------------------------------------

function current(seq, holders, waiters = 0) {
  return {
    state: 'CURRENT', name: 'L', sequence: String(seq), waiters: String(waiters), maxHolders: 0,
    holders: holders.map(([owner, value, token]) => ({
      owner, metadata: { value }, fencingToken: String(token), identity: `spiffe://x/${owner}`, position: '1',
    })),
  };
}

test('observe: leader changes, unknown, and a new stream after UNAVAILABLE', async () => {
  const { clock, stub, client } = setup();
  const obs = client.observe('L');
  const items = [];
  const reading = (async () => {
    for await (const item of obs) {
      items.push([item.kind, item.leader && [item.leader.owner, item.leader.value, item.leader.fencingToken]]);
    }
  })();
  const first = stub.observes[0];
  assert.deepStrictEqual(first.request, { name: 'L' });
  first.send(current(1, [['a', 'v1', 10]]));
  first.send(current(2, [['a', 'v1', 10]], 3)); // waiters only: not a change
  first.send({ state: 'UNKNOWN', sequence: '3', message: 'no ZooKeeper connection', holders: [] });
  first.send(current(4, [['a', 'v2', 10]]));
  first.finish(Status.UNAVAILABLE, 'draining');
  await flush();
  assert.strictEqual(stub.observes.length, 1);
  await clock.advance(50); // the backoff
  assert.strictEqual(stub.observes.length, 2);
  stub.observes[1].send(current(1, [['b', 'w', 12]]));
  stub.observes[1].send(current(2, []));
  await flush();
  obs.close();
  await reading;
  assert.deepStrictEqual(items, [['leader', ['a', 'v1', 10n]], ['unknown', null], ['leader', ['a', 'v2', 10n]],
    ['unknown', null], ['leader', ['b', 'w', 12n]], ['none', null]]);
  assert.strictEqual(stub.observes[1].cancelled, true);
  assert.strictEqual(obs.reopened, 1);
});

test('observe: other errors end it; leader() waits through unknown', async () => {
  const { stub, client } = setup();
  const obs = client.observe('L');
  const it = obs[Symbol.asyncIterator]();
  stub.observes[0].finish(Status.INVALID_ARGUMENT, 'name');
  await assert.rejects(it.next(), (e) => e.code === Status.INVALID_ARGUMENT);
  const p = client.leader('L');
  stub.observes[1].send({ state: 'UNKNOWN', holders: [] });
  stub.observes[1].send(current(2, [['a', 'v', 9]]));
  const leader = await p;
  assert.deepStrictEqual([leader.owner, leader.value, leader.fencingToken, leader.identity], ['a', 'v', 9n, 'spiffe://x/a']);
  assert.strictEqual(stub.observes[1].cancelled, true);
  const none = client.leader('L');
  stub.observes[2].send(current(1, []));
  assert.strictEqual(await none, null);
});
