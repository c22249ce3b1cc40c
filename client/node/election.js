'use strict';
/**
 * Leader election on a turnstile lock (turnstile-client).
 *
 *   const election = new Election(client, 'jobs/scheduler', {
 *     owner: 'host-a',
 *     onLeadership: (isLeader, reason) => console.log(isLeader ? 'leading' : 'not leading', reason),
 *   });
 *   const term = await election.campaign('host-a:8080', { timeout: 60000 });
 *   term.fencingToken;                      // the term: pass it to what you lead
 *   await election.proclaim('host-a:9090'); // observers see the new value
 *   await election.resign();                // the next candidate takes over
 *
 * The leader is the holder of the exclusive lock `name`; its value is the
 * hold's metadata key "value" (the convention of every turnstile client).
 *
 * campaign() is an exclusive Acquire that waits until this candidate leads.
 * Its wait is re-queued invisibly when it ends before the caller's timeout:
 * the replica's --max-wait-timeout ends it with DEADLINE_EXCEEDED (or
 * refuses a longer wait with INVALID_ARGUMENT naming its limit, which is
 * then learnt and used), or it is told RESOURCE_EXHAUSTED (too many
 * waiters) or UNAVAILABLE / CANCELLED (the replica drains or is gone;
 * through a several-replica target the next attempt reaches another); these
 * back off 50 ms doubling to 1 s. A re-queued wait joins the queue at its
 * end. campaign() rejects only on the caller's own timeout
 * (DEADLINE_EXCEEDED), bad input (INVALID_ARGUMENT), PERMISSION_DENIED, an
 * AbortSignal (CANCELLED), or a code the server should never send a
 * campaign (kept as it came). No timeout: wait until leader.
 *
 * 'leadership' (isLeader, reason), also given to onLeadership: true when
 * leadership starts (ACQUIRED) and again when it is certain again after a
 * doubt (RESUMED); false as soon as the library knows it may not lead:
 * SUSPENDED (the replica lost ZooKeeper), IN_DOUBT (the replica fell silent
 * past refresh_within), a loss (SESSION_EXPIRED, LEASE_EXPIRED, DELETED,
 * SHUTDOWN, CONNECTION, REFRESH_OVERDUE; after a doubt false is said again
 * with the loss), and RESIGNED before resign() lets go (so it is said
 * before anyone else can lead). On REVOKE_REQUESTED (someone asks the
 * leader to step down) the election resigns by itself (reason RESIGNED)
 * unless resignOnRevoke is false.
 */
const { EventEmitter } = require('events');

const core = require('./index');

const { Status, TurnstileError } = core;

const DEFAULT_ATTEMPT_WAIT_MS = 3600 * 1000; // the replicas' default --max-wait-timeout
const REQUEUED = new Set([Status.RESOURCE_EXHAUSTED, Status.UNAVAILABLE, Status.CANCELLED]);
const WAIT_LIMIT = /wait_timeout is -?\d+ms; it must be 0\.\.(\d+)ms/;

function invalid(msg) {
  return new TurnstileError(Status.INVALID_ARGUMENT, msg);
}

/**
 * The campaign's wait loop: calls attempt(waitMs) until it resolves,
 * re-queueing as the module doc says. timeout: ms, or null (no end).
 * Rejects with DEADLINE_EXCEEDED once the timeout has passed, or with any
 * other error of attempt() as it came. clock: { now, setTimeout,
 * clearTimeout } (injected by the tests); signal aborts a backoff.
 */
async function requeueUntil(timeout, attempt, { attemptWait = DEFAULT_ATTEMPT_WAIT_MS,
  clock = core._internal.realClock, signal } = {}) {
  const end = timeout === null || timeout === undefined ? null : clock.now() + timeout;
  let cap = attemptWait;
  let backoff = core._internal.FIRST_BACKOFF_MS;
  let last = null;
  const timedOut = () => new TurnstileError(Status.DEADLINE_EXCEEDED,
    `campaign: not leader within ${timeout} ms${last ? ` (last: ${last.codeName}: ${last.details})` : ''}`);
  for (;;) {
    const left = end === null ? null : end - clock.now();
    if (left !== null && left < 1) throw timedOut();
    const wait = left === null ? cap : Math.min(left, cap);
    const started = clock.now();
    try {
      return await attempt(wait);
    } catch (e) {
      if (!(e instanceof TurnstileError) || e.aborted || (signal && signal.aborted)) throw e;
      last = e;
      if (e.code === Status.INVALID_ARGUMENT) {
        const m = WAIT_LIMIT.exec(e.details || '');
        const limit = m ? Number(m[1]) : 0;
        if (!m || limit <= 0 || limit >= wait) throw e;
        cap = limit; // the replica's --max-wait-timeout: ask for that from now on
        continue;
      }
      if (e.code === Status.DEADLINE_EXCEEDED) {
        if (end !== null && clock.now() >= end - 1) throw timedOut();
        if (clock.now() - started >= Math.min(wait, 1000) / 2) {
          backoff = core._internal.FIRST_BACKOFF_MS;
          continue; // a capped wait ran out: queue again at once
        }
        // Ended early (a replica refusing at once): back off.
      } else if (!REQUEUED.has(e.code)) {
        throw e;
      }
    }
    if (end !== null && clock.now() + backoff >= end) throw timedOut();
    await core._internal.sleep(clock, backoff, signal);
    backoff = core._internal.nextBackoff(backoff);
  }
}

class Election extends EventEmitter {
  /**
   * @param {import('./index').Client} client
   * @param {string} name the lock
   * @param {object} [opts] owner, metadata (more keys stored with the
   *   value), onLeadership(isLeader, reason), resignOnRevoke (default
   *   true), ttl / lockDelay (ms, as acquire), attemptWait (ms: the longest
   *   wait of one Acquire, default 1 h).
   */
  constructor(client, name, opts = {}) {
    super();
    if (typeof name !== 'string' || name === '') throw invalid('name must be a non-empty string');
    this._client = client;
    this.name = name;
    this.owner = opts.owner === undefined ? client.defaultOwner || '' : opts.owner;
    this._metadata = { ...(opts.metadata || {}) };
    delete this._metadata.value;
    this._onLeadership = opts.onLeadership || null;
    this._resignOnRevoke = opts.resignOnRevoke !== false;
    this._ttl = opts.ttl || 0;
    this._lockDelay = opts.lockDelay || 0;
    this._attemptWait = opts.attemptWait || DEFAULT_ATTEMPT_WAIT_MS;
    if (typeof this._attemptWait !== 'number' || this._attemptWait <= 0) {
      throw invalid('attemptWait must be a positive number of milliseconds');
    }
    this._hold = null;       // the current (or last) hold
    this._value = null;
    this._leading = false;   // what was said last
    this._endSaidFor = null; // the hold whose end was said already
  }

  /** Resolves when this candidate leads: { name, value, fencingToken (the
   * term), leaseId, owner }. While this candidate holds a term (leading, or
   * in doubt: see isLeader()) it resolves with that term at once: a second
   * Acquire would only queue behind its own hold. */
  async campaign(value, { timeout = null, signal } = {}) {
    if (typeof value !== 'string') throw invalid('value must be a string');
    if (timeout !== null && timeout !== undefined &&
        (typeof timeout !== 'number' || !Number.isFinite(timeout) || timeout <= 0)) {
      throw invalid(`timeout must be a positive number of milliseconds or null, got ${String(timeout)}`);
    }
    if (this._hold && (this._hold.state === 'held' || this._hold.state === 'suspended')) return this.leadership;
    const metadata = { ...this._metadata, value };
    const clock = this._client._clock;
    const end = timeout === null || timeout === undefined ? null : clock.now() + timeout;
    const attempt = (wait) => {
      const p = this._client.acquire(this.name, {
        waitTimeout: wait, owner: this.owner, metadata, ttl: this._ttl, lockDelay: this._lockDelay, signal,
      });
      if (p.hold) this._follow(p.hold);
      return p;
    };
    for (;;) {
      const left = end === null ? null : Math.max(end - clock.now(), 0);
      const hold = await requeueUntil(left, attempt, { attemptWait: this._attemptWait, clock, signal });
      this._hold = hold;
      this._value = value;
      if (hold.state === 'held' || hold.state === 'suspended') return this.leadership;
      // Lost again before campaign could return: queue again.
    }
  }

  /** True only while the hold is held and not in doubt. */
  isLeader() {
    return this._leading && this._hold !== null && this._hold.state === 'held';
  }

  /** The current (or last) term; null before the first. */
  get leadership() {
    const h = this._hold;
    if (!h || !h.leaseId) return null;
    return { name: this.name, value: this._value, fencingToken: h.fencingToken, leaseId: h.leaseId, owner: this.owner };
  }

  /** Replaces the leader's value, keeping the leadership. Rejects with
   * FAILED_PRECONDITION when this candidate holds no term (client-side) or
   * the token is stale, NOT_FOUND when the hold is gone, INVALID_ARGUMENT
   * for a value beyond the limits. */
  async proclaim(value) {
    if (typeof value !== 'string') throw invalid('value must be a string');
    const h = this._hold;
    if (!h || (h.state !== 'held' && h.state !== 'suspended')) {
      throw new TurnstileError(Status.FAILED_PRECONDITION, `proclaim: not the leader of ${JSON.stringify(this.name)}`);
    }
    await this._client.proclaim(h.leaseId, h.fencingToken, { ...this._metadata, value });
    if (this._hold === h) this._value = value;
  }

  /** Gives up leadership: 'leadership' (false, 'RESIGNED') first, then the
   * hold is released. Resolves true if it was held until now. */
  async resign() {
    const h = this._hold;
    const was = this._leading;
    this._leading = false;
    if (!h || (h.state !== 'held' && h.state !== 'suspended')) return false;
    this._endSaidFor = h;
    if (was || h.state === 'suspended') this._say(false, 'RESIGNED');
    return h.release();
  }

  /** The election's leader changes (Client.observe of its name). */
  observe(opts) {
    return this._client.observe(this.name, opts);
  }

  /** The current leader once (Client.leader of its name). */
  leader(opts) {
    return this._client.leader(this.name, opts);
  }

  _say(isLeader, reason) {
    this.emit('leadership', isLeader, reason);
    if (this._onLeadership) this._onLeadership(isLeader, reason);
  }

  _follow(hold) {
    hold.on('acquired', () => {
      this._hold = hold; // before campaign() resolves
      this._changed(hold, 'held', 'ACQUIRED');
    });
    hold.on('suspended', (s) => this._changed(hold, 'suspended', s && s.byWatchdog ? 'IN_DOUBT' : 'SUSPENDED'));
    hold.on('resumed', () => this._changed(hold, 'held', 'RESUMED'));
    hold.on('lost', (l) => this._changed(hold, 'lost', l.reason));
    hold.on('released', () => this._changed(hold, 'released', 'RELEASED'));
    hold.on('revokeRequested', () => {
      if (this._resignOnRevoke && this._hold === hold) this.resign().catch(() => {});
    });
  }

  _changed(hold, state, reason) {
    if (hold !== this._hold) return;
    const leading = state === 'held';
    const was = this._leading;
    this._leading = leading;
    const ended = state === 'lost' || state === 'released';
    const say = leading !== was || (ended && this._endSaidFor !== hold);
    if (ended) this._endSaidFor = hold;
    if (say) this._say(leading, reason);
  }
}

module.exports = { Election, requeueUntil, DEFAULT_ATTEMPT_WAIT_MS };
