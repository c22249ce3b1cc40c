'use strict';
// Unit tests of turnstile-client without a server: option validation, the
// careful-client watchdog's timing with an injected clock, retry backoff,
// KeepAlive, release and abort, against a fake LockService stub.
const test = require('node:test');
const assert = require('node:assert');
const { EventEmitter } = require('events');
const fs = require('fs');
const os = require('os');
const path = require('path');

const { Client, TurnstileError, Status, codeName, tlsCredentials, protoRoot, loadProto, _internal } =
  require('..');

// ---- Test doubles ----------------------------------------------------------

class FakeClock {
  constructor() {
    this.t = 1000;
    this.timers = [];
  }

  now() { return this.t; }

  setTimeout(fn, ms) {
    const h = { at: this.t + Math.max(ms, 0), fn };
    this.timers.push(h);
    return h;
  }

  clearTimeout(h) {
    this.timers = this.timers.filter((x) => x !== h);
  }

  /** Moves time forward by ms, firing due timers in order (and letting the
   * promises they settle run in between). */
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
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
}

/** One fake Acquire (or KeepAlive) call. */
class FakeCall extends EventEmitter {
  constructor() {
    super();
    this.written = [];
    this.cancelled = false;
    this.ended = false;
    this.finished = false;
  }

  write(msg) { this.written.push(msg); }

  end() { this.ended = true; }

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

class FakeStub {
  constructor() {
    this.calls = [];
    this.keepAlives = [];
    this.onAcquire = null; // (call, index) => void
    this.onKeepAlive = null;
  }

  Acquire() {
    const call = new FakeCall();
    this.calls.push(call);
    if (this.onAcquire) setImmediate(() => this.onAcquire(call, this.calls.length - 1));
    return call;
  }

  KeepAlive() {
    const call = new FakeCall();
    this.keepAlives.push(call);
    const origWrite = call.write.bind(call);
    call.write = (msg) => {
      origWrite(msg);
      if (this.onKeepAlive) setImmediate(() => this.onKeepAlive(call, msg));
    };
    return call;
  }
}

const dur = (ms) => ({ seconds: String(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1e6 });

function acquiredEvent({ token = '42', safeFor = 3000, refreshWithin = 2000, validFor = null } = {}) {
  return {
    type: 'ACQUIRED',
    acquired: {
      leaseId: 'lease-1', fencingToken: token, validFor: validFor === null ? null : dur(validFor),
      sessionTimeout: dur(4000), safeFor: dur(safeFor), refreshWithin: dur(refreshWithin),
    },
  };
}

function setup(clientOpts = {}) {
  const clock = new FakeClock();
  const stub = new FakeStub();
  const client = new Client('fake:1', { stub, clock, ...clientOpts });
  return { clock, stub, client };
}

/** Acquires against the fake with an immediate ACQUIRED. */
async function held(opts = {}, ev = {}) {
  const env = setup();
  env.stub.onAcquire = (call) => call.send(acquiredEvent(ev));
  const hold = await env.client.acquire('L', opts);
  const events = [];
  for (const name of ['suspended', 'resumed', 'lost', 'released', 'revokeRequested']) {
    hold.on(name, (info) => events.push({ name, info, at: env.clock.now() }));
  }
  return { ...env, hold, events };
}

// ---- Errors and options ----------------------------------------------------

test('TurnstileError carries the code number and its name', () => {
  const e = new TurnstileError(Status.FAILED_PRECONDITION, 'held');
  assert.ok(e instanceof Error);
  assert.strictEqual(e.code, 9);
  assert.strictEqual(e.codeName, 'FAILED_PRECONDITION');
  assert.strictEqual(e.details, 'held');
  assert.match(e.message, /^FAILED_PRECONDITION: held$/);
  assert.strictEqual(codeName(14), 'UNAVAILABLE');
  assert.strictEqual(TurnstileError.fromStatus({ code: 5, details: 'gone' }).codeName, 'NOT_FOUND');
});

test('option validation: bad types and signs are INVALID_ARGUMENT before any call', async () => {
  const { client, stub } = setup();
  const bad = [
    [42, {}],
    ['L', { waitTimeout: -1 }],
    ['L', { waitTimeout: NaN }],
    ['L', { waitTimeout: '10' }],
    ['L', { ttl: -5 }],
    ['L', { lockDelay: Infinity }],
    ['L', { kind: 'reader' }],
    ['L', { kind: 'semaphore' }],
    ['L', { maxHolders: 1.5 }],
    ['L', { maxHolders: -1 }],
    ['L', { metadata: { k: 1 } }],
    ['L', { metadata: ['x'] }],
    ['L', { owner: 7 }],
    ['L', { revokeHolders: 'yes' }],
    ['L', { signal: {} }],
  ];
  for (const [name, opts] of bad) {
    await assert.rejects(client.acquire(name, opts), (e) => {
      assert.ok(e instanceof TurnstileError, `${JSON.stringify(opts)}: ${e}`);
      assert.strictEqual(e.codeName, 'INVALID_ARGUMENT');
      return true;
    });
  }
  assert.strictEqual(stub.calls.length, 0);
});

test('options map onto AcquireOpen', () => {
  const { buildOpen, toDuration, fromDuration } = _internal;
  const b = buildOpen('L', {
    waitTimeout: 1500, ttl: 2000, owner: 'me', metadata: { a: 'b' }, kind: 'shared',
    lockDelay: 250, revokeHolders: true, revokeReason: 'why',
  }, 'dflt');
  assert.strictEqual(b.waitTimeout, 1500);
  assert.deepStrictEqual(b.open, {
    name: 'L', owner: 'me', ttl: { seconds: '2', nanos: 0 }, metadata: { a: 'b' },
    kind: 'LOCK_KIND_SHARED', revokeHolders: true, revokeReason: 'why',
    lockDelay: { seconds: '0', nanos: 250000000 }, maxHolders: 0,
  });
  assert.strictEqual(buildOpen('L', { maxHolders: 3 }).open.kind, 'LOCK_KIND_SEMAPHORE');
  assert.strictEqual(buildOpen('L', {}).open.kind, 'LOCK_KIND_EXCLUSIVE');
  assert.strictEqual(buildOpen('L', {}).waitTimeout, 60000);
  assert.strictEqual(buildOpen('L', {}, 'dflt').open.owner, 'dflt');
  assert.deepStrictEqual(toDuration(1500), { seconds: '1', nanos: 500000000 });
  assert.deepStrictEqual(toDuration(0), { seconds: '0', nanos: 0 });
  assert.strictEqual(fromDuration({ seconds: '2', nanos: 5000000 }), 2005);
  assert.strictEqual(fromDuration(null), null);
});

test('the open message carries every option and the wait timeout', async () => {
  const { client, stub } = setup();
  stub.onAcquire = (call) => call.send(acquiredEvent());
  const hold = await client.acquire('pool', { waitTimeout: 0, maxHolders: 2, owner: 'o' });
  const open = stub.calls[0].written[0].open;
  assert.strictEqual(open.name, 'pool');
  assert.strictEqual(open.kind, 'LOCK_KIND_SEMAPHORE');
  assert.strictEqual(open.maxHolders, 2);
  assert.deepStrictEqual(open.waitTimeout, { seconds: '0', nanos: 0 });
  assert.strictEqual(hold.fencingToken, 42n);
  assert.strictEqual(hold.leaseId, 'lease-1');
  assert.strictEqual(hold.state, 'held');
});

// ---- Events ------------------------------------------------------------------

test('queued events come before the grant, then acquired', async () => {
  const { client, stub } = setup();
  const seen = [];
  stub.onAcquire = (call) => {
    call.send({ type: 'QUEUED', queued: { position: '3', ahead: '1' } });
    call.send({ type: 'QUEUED', queued: { position: '1', ahead: '1' } });
    call.send(acquiredEvent());
  };
  const p = client.acquire('L', { onQueued: (q) => seen.push(q.position) });
  p.hold.on('acquired', () => seen.push('acquired'));
  await p;
  assert.deepStrictEqual(seen, [3, 1, 'acquired']);
});

test('a failed wait rejects with the stream status', async () => {
  const { client, stub } = setup();
  stub.onAcquire = (call) => call.finish(Status.FAILED_PRECONDITION, 'held by someone');
  await assert.rejects(client.acquire('L', { waitTimeout: 0 }), (e) => {
    assert.strictEqual(e.codeName, 'FAILED_PRECONDITION');
    assert.strictEqual(e.details, 'held by someone');
    return true;
  });
});

test('revokeRequested, LOST from the server and CONNECTION on a broken stream', async () => {
  const a = await held();
  a.stub.calls[0].send({ type: 'REVOKE_REQUESTED', revokeRequested: { requester: 'b', reason: 'deploy' } });
  a.stub.calls[0].send({ type: 'LOST', lost: { reason: 'DELETED', message: 'released by id' } });
  assert.deepStrictEqual(a.events.map((e) => e.name), ['revokeRequested', 'lost']);
  assert.deepStrictEqual(a.events[0].info, { requester: 'b', reason: 'deploy' });
  assert.strictEqual(a.hold.lostReason, 'DELETED');
  assert.strictEqual(await a.hold.release(), false);

  const b = await held();
  b.stub.calls[0].finish(Status.UNAVAILABLE, 'connection reset');
  await flush();
  assert.deepStrictEqual(b.events.map((e) => e.name), ['lost']);
  assert.strictEqual(b.events[0].info.reason, 'CONNECTION');
});

test('release sends release and resolves on RELEASED', async () => {
  const { stub, hold, events } = await held();
  const call = stub.calls[0];
  const p = hold.release();
  assert.deepStrictEqual(call.written[1], { release: {} });
  call.send({ type: 'RELEASED' });
  assert.strictEqual(await p, true);
  assert.ok(call.ended);
  assert.deepStrictEqual(events.map((e) => e.name), ['released']);
  assert.strictEqual(await hold.release(), true); // idempotent
  assert.strictEqual(hold.validFor, 0);
});

test('release without an answer cancels the stream after its timeout', async () => {
  const { clock, stub, hold } = await held();
  const p = hold.release({ timeout: 500 });
  await clock.advance(499);
  assert.strictEqual(stub.calls[0].cancelled, false);
  await clock.advance(1);
  assert.strictEqual(await p, true);
  assert.strictEqual(stub.calls[0].cancelled, true);
});

// ---- The careful-client watchdog ---------------------------------------------

test('watchdog: silence past refresh_within suspends; a STILL_HELD in time resumes', async () => {
  const { clock, stub, hold, events } = await held({}, { safeFor: 3000, refreshWithin: 2000 });
  const t0 = clock.now();
  await clock.advance(1999);
  assert.strictEqual(hold.state, 'held');
  assert.strictEqual(hold.validFor, 1001);
  await clock.advance(1);
  assert.strictEqual(hold.state, 'suspended');
  assert.deepStrictEqual(events[0], { name: 'suspended', info: { safeUntil: t0 + 3000, byWatchdog: true }, at: t0 + 2000 });
  await clock.advance(500);
  stub.calls[0].send({ type: 'STILL_HELD', stillHeld: { safeFor: dur(3000), refreshWithin: dur(2000) } });
  assert.strictEqual(hold.state, 'held');
  assert.strictEqual(events[1].name, 'resumed');
  // STILL_HELD at +2500 moves the refresh due to +4500 and validity to +5500.
  await clock.advance(1999);
  assert.strictEqual(hold.state, 'held');
  await clock.advance(1);
  assert.strictEqual(hold.state, 'suspended');
  assert.strictEqual(events[2].at, t0 + 4500);
  await clock.advance(999);
  assert.strictEqual(hold.state, 'suspended');
  assert.strictEqual(stub.calls[0].cancelled, false);
  await clock.advance(1);
  assert.strictEqual(hold.state, 'lost');
  assert.deepStrictEqual(events[3].name, 'lost');
  assert.strictEqual(events[3].info.reason, 'REFRESH_OVERDUE');
  assert.strictEqual(events[3].at, t0 + 5500);
  assert.strictEqual(stub.calls[0].cancelled, true);
  await flush();
  assert.strictEqual(events.length, 4); // the cancelled stream adds nothing
});

test('watchdog: STILL_HELD before refresh_within keeps the hold quiet', async () => {
  const { clock, stub, hold, events } = await held({}, { safeFor: 3000, refreshWithin: 2000 });
  for (let i = 0; i < 10; i++) {
    await clock.advance(800);
    stub.calls[0].send({ type: 'STILL_HELD', stillHeld: { safeFor: dur(3000), refreshWithin: dur(2000) } });
  }
  assert.strictEqual(hold.state, 'held');
  assert.deepStrictEqual(events, []);
});

test('watchdog: a server SUSPENDED runs out its safe_for unless RESUMED', async () => {
  const a = await held({}, { safeFor: 3000, refreshWithin: 2000 });
  a.stub.calls[0].send({ type: 'SUSPENDED', suspended: { safeFor: dur(1200) } });
  assert.strictEqual(a.events[0].info.byWatchdog, false);
  await a.clock.advance(1199);
  assert.strictEqual(a.hold.state, 'suspended');
  await a.clock.advance(1);
  assert.strictEqual(a.hold.state, 'lost');
  assert.strictEqual(a.hold.lostReason, 'SESSION_EXPIRED');
  assert.strictEqual(a.stub.calls[0].cancelled, true);

  const b = await held({}, { safeFor: 3000, refreshWithin: 2000 });
  b.stub.calls[0].send({ type: 'SUSPENDED', suspended: { safeFor: dur(1200) } });
  await b.clock.advance(1000);
  b.stub.calls[0].send({ type: 'RESUMED', stillHeld: { safeFor: dur(3000), refreshWithin: dur(2000) } });
  await b.clock.advance(1999);
  assert.strictEqual(b.hold.state, 'held');
  assert.deepStrictEqual(b.events.map((e) => e.name), ['suspended', 'resumed']);
});

test('watchdog: RELEASING is ignored and a releasing hold is not watched', async () => {
  const { clock, stub, hold, events } = await held({}, { safeFor: 3000, refreshWithin: 2000 });
  stub.calls[0].send({ type: 'RELEASING' });
  assert.strictEqual(hold.state, 'held');
  const p = hold.release({ timeout: 10000 });
  await clock.advance(5000);
  assert.deepStrictEqual(events, []);
  stub.calls[0].send({ type: 'RELEASED' });
  assert.strictEqual(await p, true);
});

// ---- KeepAlive -----------------------------------------------------------------

test('a TTL lease is renewed every ttl/3 until released', async () => {
  const { clock, stub, hold } = await held({ ttl: 1500 });
  let renewals = 0;
  stub.onKeepAlive = (call, msg) => {
    renewals++;
    assert.deepStrictEqual(msg, { leaseIds: ['lease-1'] });
    call.send({ leases: [{ leaseId: 'lease-1', code: 0, message: '', validFor: dur(1500) }] });
  };
  await clock.advance(499);
  assert.strictEqual(renewals, 0);
  for (let i = 1; i <= 4; i++) {
    await clock.advance(500);
    assert.strictEqual(renewals, i);
    stub.calls[0].send({ type: 'STILL_HELD', stillHeld: { safeFor: dur(3000), refreshWithin: dur(2000) } });
  }
  assert.ok(stub.keepAlives.every((c) => c.cancelled));
  const p = hold.release();
  stub.calls[0].send({ type: 'RELEASED' });
  await p;
  await clock.advance(3000);
  assert.strictEqual(renewals, 4);
});

test('KeepAlive NOT_FOUND stops renewing; the stream reports the loss', async () => {
  const { clock, stub } = await held({ ttl: 900 });
  let renewals = 0;
  stub.onKeepAlive = (call) => {
    renewals++;
    call.send({ leases: [{ leaseId: 'lease-1', code: Status.NOT_FOUND, message: 'gone', validFor: null }] });
  };
  await clock.advance(300);
  assert.strictEqual(renewals, 1);
  await clock.advance(900);
  assert.strictEqual(renewals, 1);
});

// ---- Retry -----------------------------------------------------------------

test('backoff: 50 ms doubling to 1 s', () => {
  const seq = [_internal.FIRST_BACKOFF_MS];
  while (seq.length < 8) seq.push(_internal.nextBackoff(seq[seq.length - 1]));
  assert.deepStrictEqual(seq, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
});

test('UNAVAILABLE is retried with backoff until the wait deadline', async () => {
  const { clock, stub, client } = setup();
  const starts = [];
  stub.onAcquire = (call) => {
    starts.push(clock.now());
    call.finish(Status.UNAVAILABLE, 'draining');
  };
  const t0 = clock.now();
  const p = client.acquire('L', { waitTimeout: 3000 });
  let err = null;
  p.catch((e) => { err = e; });
  await clock.advance(4000);
  assert.ok(err, 'rejected');
  assert.strictEqual(err.codeName, 'UNAVAILABLE');
  assert.deepStrictEqual(starts.map((t) => t - t0), [0, 50, 150, 350, 750, 1550, 2550]);
  // Each retry asks only for what is left of the wait.
  const waits = stub.calls.map((c) => _internal.fromDuration(c.written[0].open.waitTimeout));
  assert.deepStrictEqual(waits, [3000, 2950, 2850, 2650, 2250, 1450, 450]);
});

test('CANCELLED from the server is retried, and the retry can hold', async () => {
  const { clock, stub, client } = setup();
  stub.onAcquire = (call, i) => {
    if (i < 2) call.finish(i === 0 ? Status.CANCELLED : Status.UNAVAILABLE, 'shutting down');
    else call.send(acquiredEvent({ token: '7' }));
  };
  const p = client.acquire('L', { waitTimeout: 5000 });
  await clock.advance(200);
  const hold = await p;
  assert.strictEqual(hold.fencingToken, 7n);
  assert.strictEqual(stub.calls.length, 3);
});

test('try-once, other codes and retryUnavailable=false are not retried', async () => {
  for (const [opts, code, clientOpts] of [
    [{ waitTimeout: 0 }, Status.UNAVAILABLE, {}],
    [{ waitTimeout: 5000 }, Status.DEADLINE_EXCEEDED, {}],
    [{ waitTimeout: 5000 }, Status.INVALID_ARGUMENT, {}],
    [{ waitTimeout: 5000 }, Status.UNAVAILABLE, { retryUnavailable: false }],
  ]) {
    const { clock, stub, client } = setup(clientOpts);
    stub.onAcquire = (call) => call.finish(code, 'no');
    const p = client.acquire('L', opts);
    let err = null;
    p.catch((e) => { err = e; });
    await clock.advance(6000);
    assert.strictEqual(err && err.code, code);
    assert.strictEqual(stub.calls.length, 1);
  }
});

test('no answer within wait timeout + grace: DEADLINE_EXCEEDED and the stream cancelled', async () => {
  const { clock, stub, client } = setup({ grace: 1000 });
  const p = client.acquire('L', { waitTimeout: 2000 });
  let err = null;
  p.catch((e) => { err = e; });
  await clock.advance(2999);
  assert.strictEqual(err, null);
  await clock.advance(1);
  assert.strictEqual(err && err.codeName, 'DEADLINE_EXCEEDED');
  assert.strictEqual(stub.calls[0].cancelled, true);
});

// ---- AbortSignal ---------------------------------------------------------------

test('an AbortSignal cancels the wait (and a retry backoff), never retried', async () => {
  const { clock, stub, client } = setup();
  const ac = new AbortController();
  const p = client.acquire('L', { waitTimeout: 10000, signal: ac.signal });
  await clock.advance(10);
  ac.abort();
  await assert.rejects(p, (e) => e.codeName === 'CANCELLED');
  assert.strictEqual(stub.calls[0].cancelled, true);
  await clock.advance(5000);
  assert.strictEqual(stub.calls.length, 1);

  const b = setup();
  b.stub.onAcquire = (call) => call.finish(Status.UNAVAILABLE, 'down');
  const ac2 = new AbortController();
  const p2 = b.client.acquire('L', { waitTimeout: 10000, signal: ac2.signal });
  await b.clock.advance(20); // first attempt failed; backing off
  ac2.abort();
  await assert.rejects(p2, (e) => e.codeName === 'CANCELLED');
  await b.clock.advance(5000);
  assert.strictEqual(b.stub.calls.length, 1);

  const ac3 = new AbortController();
  ac3.abort();
  await assert.rejects(setup().client.acquire('L', { signal: ac3.signal }), (e) => e.codeName === 'CANCELLED');
});

test('release() of a hold still waiting abandons the wait', async () => {
  const { clock, stub, client } = setup();
  stub.onAcquire = (call) => call.send({ type: 'QUEUED', queued: { position: '2', ahead: '1' } });
  const p = client.acquire('L', { waitTimeout: 10000 });
  await clock.advance(10);
  assert.strictEqual(await p.hold.release(), false);
  await assert.rejects(p, (e) => e.codeName === 'CANCELLED' && /before it was granted/.test(e.message));
  assert.strictEqual(stub.calls[0].cancelled, true);
  await clock.advance(5000);
  assert.strictEqual(stub.calls.length, 1);
});

test('release() during a retry backoff abandons the wait too', async () => {
  const { clock, stub, client } = setup();
  stub.onAcquire = (call) => call.finish(Status.UNAVAILABLE, 'draining');
  const p = client.acquire('L', { waitTimeout: 10000 });
  let err = null;
  p.catch((e) => { err = e; });
  await clock.advance(20); // the first attempt failed; backing off (50 ms)
  assert.strictEqual(stub.calls.length, 1);
  assert.strictEqual(await p.hold.release(), false);
  await clock.advance(5000);
  assert.strictEqual(err && err.codeName, 'CANCELLED');
  assert.strictEqual(stub.calls.length, 1);
});

// ---- TLS and protos ------------------------------------------------------------------

test('TLS from the TURNSTILE_TLS_* variables, like the CLI', () => {
  assert.strictEqual(tlsCredentials({}, {}), null);
  assert.throws(() => tlsCredentials({}, { TURNSTILE_TLS_CERT_FILE: '/x' }), /go together/);
  assert.throws(() => tlsCredentials({}, { TURNSTILE_TLS_CERT_FILE: '/x', TURNSTILE_TLS_KEY_FILE: '/y' }),
    /needs a CA file/);
  assert.throws(() => tlsCredentials({}, { TURNSTILE_TLS_CA_FILE: '/nonexistent/ca.pem' }), /ENOENT/);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnstile-node-'));
  try {
    const ca = path.join(dir, 'ca.pem');
    fs.writeFileSync(ca, '');
    const creds = tlsCredentials({}, { TURNSTILE_TLS_CA_FILE: ca });
    assert.ok(creds && creds._isSecure());
    // Explicit files win over the environment.
    assert.strictEqual(tlsCredentials({ caFile: ca }, {})._isSecure(), true);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('the proto loads from the repository', () => {
  assert.ok(fs.existsSync(path.join(protoRoot(), 'turnstile', 'v1', 'lock.proto')));
  const { LockService } = loadProto();
  assert.strictEqual(typeof LockService, 'function');
  for (const m of ['Acquire', 'Release', 'KeepAlive', 'Describe', 'List', 'Revoke', 'CheckToken']) {
    assert.ok(LockService.service[m], m);
  }
  const c = new Client('127.0.0.1:1', { env: {} });
  c.close();
});

test('checkToken over gRPC: the request fields, the verdicts and the codes', async () => {
  const grpc = require('@grpc/grpc-js');
  const { LockService } = loadProto();
  const seen = [];
  const server = new grpc.Server();
  // Lock "L" has the holder 7 and the waiter 9; "denied" is refused by policy;
  // "future" answers a verdict this library does not know.
  server.addService(LockService.service, {
    CheckToken(call, cb) {
      const r = call.request;
      seen.push(r);
      if (r.name === '' || r.fencingToken === '0') {
        cb({ code: Status.INVALID_ARGUMENT, details: 'name or fencing_token' });
      } else if (r.name === 'denied') {
        cb({ code: Status.PERMISSION_DENIED, details: 'describe denied' });
      } else {
        const verdict = r.name === 'future' ? 99
          : { 7: 'CURRENT', 9: 'WAITING' }[r.fencingToken] || 'SUPERSEDED';
        cb(null, { verdict, highestHolderToken: '7', linearizable: !r.allowStale });
      }
    },
  });
  const port = await new Promise((resolve, reject) => server.bindAsync('127.0.0.1:0',
    grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  const client = new Client(`127.0.0.1:${port}`, { env: {}, timeout: 5000 });
  try {
    for (const [token, verdict] of [[7n, 'CURRENT'], [5n, 'SUPERSEDED'], [9n, 'WAITING']]) {
      assert.deepStrictEqual(await client.checkToken('L', token),
        { verdict, highestHolderToken: 7n, linearizable: true });
    }
    assert.deepStrictEqual(await client.checkToken('L', 7n, { allowStale: true }),
      { verdict: 'CURRENT', highestHolderToken: 7n, linearizable: false });
    const last = seen[seen.length - 1];
    assert.deepStrictEqual([last.name, last.fencingToken, last.allowStale], ['L', '7', true]);
    // A token above 2^53 goes through exactly.
    await client.checkToken('L', 18446744073709551615n);
    assert.strictEqual(seen[seen.length - 1].fencingToken, '18446744073709551615');
    for (const [name, token, code] of [['L', 0n, 'INVALID_ARGUMENT'], ['', 7n, 'INVALID_ARGUMENT'],
      ['denied', 7n, 'PERMISSION_DENIED'], ['future', 7n, 'UNKNOWN']]) {
      await assert.rejects(client.checkToken(name, token),
        (e) => e instanceof TurnstileError && e.codeName === code, `${name} ${token}`);
    }
    await assert.rejects(client.checkToken('L', {}), (e) => e.codeName === 'INVALID_ARGUMENT');
  } finally {
    client.close();
    server.forceShutdown();
  }
});
