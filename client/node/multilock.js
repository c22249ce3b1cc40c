'use strict';
/**
 * All-or-nothing multi-lock for turnstile-client.
 *
 *   const set = await client.acquireAll(['accounts/7', 'accounts/3'], { waitTimeout: 10000 });
 *   set.on('lost', ({ name, reason }) => { ...stop: the set is gone... });
 *   set.fencingTokens.get('accounts/3');   // each name keeps its own token
 *   await set.release();                   // releases every lock
 *
 * The locks are taken one by one in canonical order, sorted by the UTF-8
 * bytes of their names (not by JavaScript's UTF-16 string order, which
 * differs for characters beyond the BMP; every turnstile client sorts the
 * same way), so two multi-locks that overlap never wait for each other in
 * a cycle. One deadline covers the whole set: each lock waits only for what
 * is left of it. When any lock cannot be had (timeout, refusal, error,
 * abort), every lock already taken is released before the promise rejects.
 * A try-once (waitTimeout 0) tries each name once.
 *
 * A MultiHold is one hold: state 'held' while every lock is held,
 * 'suspended' while any is in doubt and none is gone, 'lost' as soon as any
 * is lost (the library then releases the others: the set is gone),
 * 'released' after release(). Events: 'suspended' / 'resumed' / 'lost'
 * ({ name, reason }: the lock that caused it).
 */
const { EventEmitter } = require('events');

const core = require('./index');

const { Status, TurnstileError } = core;

function invalid(msg) {
  return new TurnstileError(Status.INVALID_ARGUMENT, msg);
}

/** The names in canonical order (UTF-8 bytes); INVALID_ARGUMENT for an
 * empty set, a non-string or empty name, or a name given twice. */
function canonicalOrder(names) {
  if (!Array.isArray(names)) throw invalid('names must be an array of lock names');
  if (names.length === 0) throw invalid('names: at least one lock name');
  const seen = new Set();
  for (const n of names) {
    if (typeof n !== 'string' || n === '') {
      throw invalid(`names: every name must be a non-empty string, got ${JSON.stringify(n)}`);
    }
    if (seen.has(n)) throw invalid(`names: ${JSON.stringify(n)} is given twice`);
    seen.add(n);
  }
  return names
    .map((n) => ({ n, b: Buffer.from(n, 'utf8') }))
    .sort((x, y) => Buffer.compare(x.b, y.b))
    .map((x) => x.n);
}

const LIVE = new Set(['held', 'suspended']);

class MultiHold extends EventEmitter {
  constructor() {
    super();
    /** @type {Map<string, import('./index').Hold>} name -> Hold, canonical order */
    this.holds = new Map();
    this.state = 'waiting';
    this.lostName = null;
    this.lostReason = null;
    this._releasing = false;
  }

  get held() {
    return this.state === 'held';
  }

  /** name -> fencing token (bigint). */
  get fencingTokens() {
    return new Map([...this.holds].map(([n, h]) => [n, h.fencingToken]));
  }

  /** name -> lease id. */
  get leaseIds() {
    return new Map([...this.holds].map(([n, h]) => [n, h.leaseId]));
  }

  /** Releases every lock (in reverse order). Resolves true if the set was
   * held until now, false if it had been lost. Idempotent. */
  async release(options) {
    const was = this.state;
    this._releasing = true;
    if (was === 'held' || was === 'suspended' || was === 'waiting') this.state = 'released';
    const ok = await this._releaseAll(options);
    return ok && (was === 'held' || was === 'suspended');
  }

  async _releaseAll(options) {
    let ok = true;
    for (const h of [...this.holds.values()].reverse()) {
      try {
        ok = (await h.release(options)) && ok;
      } catch (e) {
        ok = false;
      }
    }
    return ok;
  }

  _watch(name, hold) {
    hold.on('suspended', (s) => this._memberChanged(name, s && s.byWatchdog ? 'IN_DOUBT' : 'SUSPENDED'));
    hold.on('resumed', () => this._memberChanged(name, 'RESUMED'));
    hold.on('lost', (l) => this._memberChanged(name, l.reason));
    hold.on('released', () => this._memberChanged(name, 'RELEASED'));
  }

  _combined() {
    const states = [...this.holds.values()].map((h) => h.state);
    if (states.some((s) => !LIVE.has(s))) return 'lost';
    if (states.some((s) => s === 'suspended')) return 'suspended';
    return 'held';
  }

  _memberChanged(name, reason) {
    if (this._releasing || this.state === 'lost' || this.state === 'released') return;
    const hold = this.holds.get(name);
    if (this.state === 'waiting') {
      if (hold && !LIVE.has(hold.state) && this.lostName === null) {
        this.lostName = name;
        this.lostReason = reason;
      }
      return;
    }
    const old = this.state;
    const now = this._combined();
    if (now === old) return;
    this.state = now;
    if (now === 'lost') {
      this.lostName = name;
      this.lostReason = reason;
      this.emit('lost', { name, reason });
      this._releaseAll().catch(() => {}); // the set is gone: let the others go
    } else if (now === 'suspended') {
      this.emit('suspended', { name, reason });
    } else {
      this.emit('resumed', { name, reason });
    }
  }
}

/**
 * Takes every lock of `names` all-or-nothing (see the module doc).
 * acquire(name, waitTimeoutMs) resolves with a held Hold (Client.acquire
 * with the caller's options); clock: now() in ms. Rejects with
 * TurnstileError: INVALID_ARGUMENT (before any call), DEADLINE_EXCEEDED,
 * FAILED_PRECONDITION (try-once on a held lock), ABORTED (a lock already
 * taken was lost while waiting for the rest), or what acquire rejected
 * with; no lock of the set is held then.
 */
async function acquireAll(acquire, names, { waitTimeout = 60000, clock = core._internal.realClock } = {}) {
  const order = canonicalOrder(names);
  if (typeof waitTimeout !== 'number' || !Number.isFinite(waitTimeout) || waitTimeout < 0) {
    throw invalid(`waitTimeout must be a non-negative number of milliseconds, got ${String(waitTimeout)}`);
  }
  const multi = new MultiHold();
  const end = clock.now() + waitTimeout;
  try {
    for (const name of order) {
      let left = 0;
      if (waitTimeout > 0) {
        left = end - clock.now();
        if (left < 1) {
          throw new TurnstileError(Status.DEADLINE_EXCEEDED,
            `acquireAll: the ${waitTimeout} ms deadline passed with ${multi.holds.size} of ` +
            `${order.length} locks taken (next: ${JSON.stringify(name)})`);
        }
      }
      const hold = await acquire(name, left);
      multi.holds.set(name, hold);
      multi._watch(name, hold);
      const gone = [...multi.holds].find(([, h]) => !LIVE.has(h.state));
      if (multi.lostName !== null || gone) {
        const n = multi.lostName || gone[0];
        throw new TurnstileError(Status.ABORTED,
          `acquireAll: ${JSON.stringify(n)} was lost (${multi.lostReason || multi.holds.get(n).lostReason}) ` +
          'while taking the others');
      }
    }
    multi.state = multi._combined();
    return multi;
  } catch (e) {
    multi._releasing = true;
    multi.state = 'released';
    await multi._releaseAll();
    throw e;
  }
}

module.exports = { acquireAll, canonicalOrder, MultiHold };
