'use strict';
/**
 * Observe for turnstile-client: follows the leader (the first holder) of one
 * lock. Client.observe(name) returns an Observation:
 *
 *   const obs = client.observe('jobs/scheduler');
 *   for await (const item of obs) {          // or obs.on('change', item => ...)
 *     if (item.kind === 'leader') console.log(item.leader.value, item.leader.fencingToken);
 *   }
 *   // obs.close() (or an AbortSignal) ends it
 *
 * Items: { kind: 'leader' | 'none' | 'unknown', leader, holders, waiters,
 * maxHolders, sequence, message }. 'unknown': the replica has no ZooKeeper
 * connection, or the stream failed and is being opened again.
 *
 * The stream is opened again through the client's target (with the retry
 * backoff, 50 ms doubling to 1 s) when it ends with UNAVAILABLE (the
 * replica drains or cannot be reached), CANCELLED by a replica shutting
 * down, or without a status; an 'unknown' item says so first. Any other
 * status ends the observation with an 'error' event (and the iterator
 * throws it). changesOnly (default true) gives an item only when the
 * leader (token, owner, metadata) or the kind differs from the last one.
 */
const { EventEmitter } = require('events');

const core = require('./index');

const { Status, TurnstileError } = core;

function sameLeader(a, b) {
  if (!a || !b || a.kind !== b.kind) return false;
  if (a.kind !== 'leader') return true;
  const x = a.leader;
  const y = b.leader;
  return x.fencingToken === y.fencingToken && x.owner === y.owner &&
    JSON.stringify(sortedEntries(x.metadata)) === JSON.stringify(sortedEntries(y.metadata));
}

function sortedEntries(m) {
  return Object.entries(m || {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** An ObserveEvent (proto-loader object) as an item. */
function leaderItem(ev, contender) {
  if (ev.state !== 'CURRENT') {
    return {
      kind: 'unknown', leader: null, holders: [], waiters: 0, maxHolders: 0,
      sequence: Number(ev.sequence || 0), message: ev.message || 'the replica\'s state is unknown',
    };
  }
  const holders = (ev.holders || []).map(contender);
  let leader = null;
  if (holders.length > 0) {
    const h = holders[0];
    leader = {
      value: Object.prototype.hasOwnProperty.call(h.metadata, 'value') ? h.metadata.value : null,
      owner: h.owner, identity: h.identity, fencingToken: h.fencingToken,
      granted: h.granted, since: h.since, metadata: h.metadata,
    };
  }
  return {
    kind: leader ? 'leader' : 'none', leader, holders, waiters: Number(ev.waiters || 0),
    maxHolders: ev.maxHolders || 0, sequence: Number(ev.sequence || 0), message: '',
  };
}

const REOBSERVED = new Set([Status.UNAVAILABLE, Status.CANCELLED, Status.OK]);

class Observation extends EventEmitter {
  constructor(client, name, { changesOnly = true, signal } = {}) {
    super();
    this._client = client;
    this._clock = client._clock;
    this.name = name;
    this._changesOnly = changesOnly;
    this._call = null;
    this._last = null;
    this._closed = false;
    this._error = null;
    this._backoff = core._internal.FIRST_BACKOFF_MS;
    this._timer = null;
    this._queue = [];      // items not yet taken by the async iterator
    this._iterating = false;
    this._wake = null;
    /** Streams opened again after a failure. */
    this.reopened = 0;
    if (signal) {
      if (signal.aborted) {
        this._closed = true;
        return;
      }
      signal.addEventListener('abort', () => this.close(), { once: true });
    }
    this._open();
  }

  _open() {
    if (this._closed) return;
    const call = this._client._stub.Observe({ name: this.name });
    this._call = call;
    call.on('data', (ev) => {
      if (call !== this._call || this._closed) return;
      this._backoff = core._internal.FIRST_BACKOFF_MS;
      this._push(leaderItem(ev, core._internal.contender));
    });
    call.on('error', () => {}); // the status says it all
    call.on('status', (st) => setImmediate(() => this._onEnd(call, st)));
  }

  _onEnd(call, st) {
    if (call !== this._call || this._closed) return;
    this._call = null;
    const code = st ? st.code : Status.OK;
    if (!REOBSERVED.has(code)) {
      this._fail(TurnstileError.fromStatus(st));
      return;
    }
    this.reopened += 1;
    this._push({
      kind: 'unknown', leader: null, holders: [], waiters: 0, maxHolders: 0, sequence: 0,
      message: `observing again: ${core.codeName(code)}: ${(st && st.details) || 'the stream ended'}`,
    });
    const delay = this._backoff;
    this._backoff = core._internal.nextBackoff(this._backoff);
    this._timer = this._clock.setTimeout(() => {
      this._timer = null;
      this._open();
    }, delay);
  }

  _push(item) {
    if (this._changesOnly && sameLeader(item, this._last)) return;
    this._last = item;
    if (this._iterating) this._queue.push(item);
    this.emit('change', item);
    this._kick();
  }

  _fail(err) {
    this._error = err;
    this._closed = true;
    if (this.listenerCount('error') > 0) this.emit('error', err);
    this.emit('close');
    this._kick();
  }

  _kick() {
    if (this._wake) {
      const w = this._wake;
      this._wake = null;
      w();
    }
  }

  /** Ends the observation (idempotent): the iterator finishes, 'close' is emitted. */
  close() {
    if (this._closed) return;
    this._closed = true;
    if (this._timer !== null) { this._clock.clearTimeout(this._timer); this._timer = null; }
    const call = this._call;
    this._call = null;
    if (call) call.cancel();
    this.emit('close');
    this._kick();
  }

  get closed() {
    return this._closed;
  }

  [Symbol.asyncIterator]() {
    this._iterating = true;
    return {
      next: async () => {
        for (;;) {
          if (this._queue.length > 0) return { value: this._queue.shift(), done: false };
          if (this._error) throw this._error;
          if (this._closed) return { value: undefined, done: true };
          await new Promise((resolve) => { this._wake = resolve; });
        }
      },
      return: async () => {
        this.close();
        return { value: undefined, done: true };
      },
    };
  }
}

module.exports = { Observation, leaderItem, sameLeader };
