'use strict';
/**
 * turnstile-client: the Node.js client for turnstile (turnstile.v1.LockService).
 *
 *   const { Client } = require('turnstile-client');
 *   const client = new Client('127.0.0.1:7400');
 *   const hold = await client.acquire('my-lock', { waitTimeout: 30000, owner: 'me' });
 *   hold.on('lost', ({ reason }) => { ...stop using the resource... });
 *   use(hold.fencingToken);            // pass it to the protected resource
 *   await hold.release();
 *
 * Times are milliseconds. Every failure rejects with a TurnstileError whose
 * `code` is the gRPC status code number and `codeName` its name
 * (FAILED_PRECONDITION for a try-once on a held lock, DEADLINE_EXCEEDED when
 * the wait timed out, ...).
 *
 * A Hold is held while its Acquire stream stays open. It is an EventEmitter:
 *   'queued'          ({position, ahead})   while waiting
 *   'acquired'        ()                    granted (before acquire() resolves)
 *   'suspended'       ({safeUntil, byWatchdog})  the hold is in doubt
 *   'resumed'         ()                    no longer in doubt
 *   'lost'            ({reason, message})   gone without asking; terminal
 *   'revokeRequested' ({requester, reason}) someone asks us to let go
 *   'released'        ()                    released on request; terminal
 * The careful-client rules of lock.proto are applied: the hold counts as
 * valid only until (receipt + safe_for) of the latest ACQUIRED/STILL_HELD;
 * silence past refresh_within makes it 'suspended', and once that validity
 * has run out it is 'lost' (reason REFRESH_OVERDUE) and the stream is
 * cancelled. With ttl > 0 the lease is renewed by KeepAlive every ttl/3.
 */
const fs = require('fs');
const path = require('path');
const { EventEmitter } = require('events');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const Status = grpc.status;
const CODE_NAMES = {};
for (const [name, num] of Object.entries(Status)) CODE_NAMES[num] = name;

function codeName(code) {
  return CODE_NAMES[code] || `CODE_${code}`;
}

class TurnstileError extends Error {
  /**
   * @param {number} code gRPC status code number
   * @param {string} details the server's (or the client's) message
   */
  constructor(code, details = '', options) {
    super(`${codeName(code)}: ${details}`, options);
    this.name = 'TurnstileError';
    this.code = code;
    this.codeName = codeName(code);
    this.details = details;
  }

  static fromStatus(st) {
    const code = st && typeof st.code === 'number' ? st.code : Status.UNKNOWN;
    return new TurnstileError(code, (st && st.details) || (st && st.message) || '');
  }
}

// ---- Protos ----------------------------------------------------------------

/** Where lock.proto lives: protos/ inside the package (published), else the
 * repository's protos/ (../../protos from client/node). */
function protoRoot() {
  const candidates = [path.join(__dirname, 'protos'), path.join(__dirname, '..', '..', 'protos')];
  for (const dir of candidates) {
    if (fs.existsSync(path.join(dir, 'turnstile', 'v1', 'lock.proto'))) return dir;
  }
  throw new Error(`turnstile-client: lock.proto not found (tried ${candidates.join(', ')})`);
}

let loaded = null;
function loadProto(root) {
  if (loaded && !root) return loaded;
  const dir = root || protoRoot();
  const def = protoLoader.loadSync('turnstile/v1/lock.proto', {
    includeDirs: [dir],
    keepCase: false,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const pkg = grpc.loadPackageDefinition(def);
  const result = { LockService: pkg.turnstile.v1.LockService };
  if (!root) loaded = result;
  return result;
}

// ---- Clock (injectable for tests) ------------------------------------------

const realClock = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h),
};

function sleep(clock, ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) return reject(abortError(signal));
    let onAbort;
    const h = clock.setTimeout(() => {
      if (signal) signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    if (signal) {
      onAbort = () => {
        clock.clearTimeout(h);
        reject(abortError(signal));
      };
      signal.addEventListener('abort', onAbort, { once: true });
    }
  });
}

function abortError(signal) {
  return new TurnstileError(Status.CANCELLED, 'the acquire was aborted', { cause: signal && signal.reason });
}

// ---- Durations ---------------------------------------------------------------

function toDuration(ms) {
  const totalNanos = BigInt(Math.round(ms * 1e6));
  const seconds = totalNanos / 1000000000n;
  const nanos = Number(totalNanos % 1000000000n);
  return { seconds: seconds.toString(), nanos };
}

function fromDuration(d) {
  if (!d) return null;
  return Number(d.seconds || 0) * 1000 + (d.nanos || 0) / 1e6;
}

// ---- Options -------------------------------------------------------------

const KINDS = {
  exclusive: 'LOCK_KIND_EXCLUSIVE',
  shared: 'LOCK_KIND_SHARED',
  semaphore: 'LOCK_KIND_SEMAPHORE',
};

function invalid(msg) {
  return new TurnstileError(Status.INVALID_ARGUMENT, msg);
}

function checkMs(opts, key, dflt) {
  const v = opts[key];
  if (v === undefined || v === null) return dflt;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    throw invalid(`${key} must be a non-negative number of milliseconds, got ${String(v)}`);
  }
  return v;
}

function checkString(opts, key) {
  const v = opts[key];
  if (v === undefined || v === null) return '';
  if (typeof v !== 'string') throw invalid(`${key} must be a string, got ${typeof v}`);
  return v;
}

/**
 * Validates acquire() options and builds the AcquireOpen message (without
 * wait_timeout, which the retry loop sets). Throws TurnstileError
 * (INVALID_ARGUMENT) on a wrong type or sign; ranges and lengths are the
 * server's to check (it answers INVALID_ARGUMENT naming the field).
 */
function buildOpen(name, opts, defaultOwner) {
  if (typeof name !== 'string') throw invalid(`the lock name must be a string, got ${typeof name}`);
  if (opts === null || typeof opts !== 'object') throw invalid('options must be an object');
  const waitTimeout = checkMs(opts, 'waitTimeout', 60000);
  const ttl = checkMs(opts, 'ttl', 0);
  const lockDelay = checkMs(opts, 'lockDelay', 0);
  const owner = opts.owner === undefined ? defaultOwner || '' : checkString(opts, 'owner');
  const revokeReason = checkString(opts, 'revokeReason');
  if (opts.revokeHolders !== undefined && typeof opts.revokeHolders !== 'boolean') {
    throw invalid('revokeHolders must be a boolean');
  }
  let maxHolders = 0;
  if (opts.maxHolders !== undefined && opts.maxHolders !== null) {
    if (!Number.isInteger(opts.maxHolders) || opts.maxHolders < 0) {
      throw invalid(`maxHolders must be a non-negative integer, got ${String(opts.maxHolders)}`);
    }
    maxHolders = opts.maxHolders;
  }
  let kind;
  if (opts.kind === undefined || opts.kind === null) {
    kind = maxHolders > 0 ? 'semaphore' : 'exclusive';
  } else if (Object.prototype.hasOwnProperty.call(KINDS, opts.kind)) {
    kind = opts.kind;
  } else {
    throw invalid(`kind must be one of exclusive, shared, semaphore; got ${String(opts.kind)}`);
  }
  if (kind === 'semaphore' && maxHolders === 0) {
    throw invalid('kind semaphore needs maxHolders (its N, 1 or more)');
  }
  const metadata = {};
  if (opts.metadata !== undefined && opts.metadata !== null) {
    if (typeof opts.metadata !== 'object' || Array.isArray(opts.metadata)) {
      throw invalid('metadata must be an object of string values');
    }
    for (const [k, v] of Object.entries(opts.metadata)) {
      if (typeof v !== 'string') throw invalid(`metadata[${JSON.stringify(k)}] must be a string`);
      metadata[k] = v;
    }
  }
  if (opts.signal !== undefined && opts.signal !== null &&
      (typeof opts.signal !== 'object' || typeof opts.signal.aborted !== 'boolean')) {
    throw invalid('signal must be an AbortSignal');
  }
  return {
    waitTimeout,
    ttl,
    open: {
      name,
      owner,
      ttl: toDuration(ttl),
      metadata,
      kind: KINDS[kind],
      revokeHolders: Boolean(opts.revokeHolders),
      revokeReason,
      lockDelay: toDuration(lockDelay),
      maxHolders,
    },
  };
}

/** The retry delays: 50 ms doubling to 1 s. */
function nextBackoff(ms) {
  return Math.min(ms * 2, 1000);
}
const FIRST_BACKOFF_MS = 50;

function retryable(err) {
  return err instanceof TurnstileError && !err.aborted &&
    (err.code === Status.UNAVAILABLE || err.code === Status.CANCELLED);
}

// ---- TLS -----------------------------------------------------------------

/**
 * Channel credentials from PEM files; null = plaintext. With no file given,
 * TURNSTILE_TLS_CA_FILE, TURNSTILE_TLS_CERT_FILE and TURNSTILE_TLS_KEY_FILE
 * are read, like the CLI.
 */
function tlsCredentials({ caFile, certFile, keyFile } = {}, env = process.env) {
  if (!caFile && !certFile && !keyFile) {
    caFile = env.TURNSTILE_TLS_CA_FILE || undefined;
    certFile = env.TURNSTILE_TLS_CERT_FILE || undefined;
    keyFile = env.TURNSTILE_TLS_KEY_FILE || undefined;
  }
  if (Boolean(certFile) !== Boolean(keyFile)) {
    throw invalid('the TLS certificate file and key file go together');
  }
  if (!caFile) {
    if (certFile) throw invalid('a TLS client certificate needs a CA file (it is only sent over TLS)');
    return null;
  }
  return grpc.credentials.createSsl(
    fs.readFileSync(caFile),
    keyFile ? fs.readFileSync(keyFile) : null,
    certFile ? fs.readFileSync(certFile) : null);
}

// ---- Hold ----------------------------------------------------------------

const WAITING = 'waiting';
const HELD = 'held';
const SUSPENDED = 'suspended';
const LOST = 'lost';
const RELEASED = 'released';
const FAILED = 'failed';

class Hold extends EventEmitter {
  constructor(client, name, ttl) {
    super();
    this._client = client;
    this._clock = client._clock;
    this.name = name;
    this.state = WAITING;
    this.position = null;
    this.ahead = null;
    this.leaseId = null;
    /** @type {bigint|null} */
    this.fencingToken = null;
    this.sessionTimeout = null;
    this.lostReason = null;
    this.lostMessage = '';
    this.revokeRequests = [];
    /** clock.now() ms until which the hold is certainly valid (refresh). */
    this.validUntil = null;
    /** clock.now() ms until which a suspended hold is safe. */
    this.safeUntil = null;
    this._ttl = ttl;
    this._leaseValidUntil = null;
    this._refreshWithin = 0;
    this._refreshDue = 0;
    this._silent = false;
    this._call = null;
    this._ended = false;
    this._releasing = false;
    this._wdTimer = null;
    this._kaTimer = null;
    this._settle = null; // (err|null) => void while acquire() waits
    this._endWaiters = [];
  }

  get held() {
    return this.state === HELD;
  }

  /** Milliseconds the hold is still known valid, 0 once lost or released,
   * Infinity against a server that sends no refreshes (without TTL). */
  get validFor() {
    if (this.state !== HELD && this.state !== SUSPENDED) return 0;
    const now = this._clock.now();
    let until = Infinity;
    if (this.validUntil !== null) until = Math.min(until, this.validUntil);
    if (this.state === SUSPENDED && this.safeUntil !== null) until = Math.min(until, this.safeUntil);
    if (this._leaseValidUntil !== null) until = Math.min(until, this._leaseValidUntil);
    return Math.max(until - now, 0);
  }

  // One Acquire stream; resolves when ACQUIRED, rejects with the status.
  _attempt(open, waitTimeout, graceMs) {
    return new Promise((resolve, reject) => {
      this.state = WAITING;
      this._ended = false;
      const call = this._client._stub.Acquire();
      this._call = call;
      let done = false;
      let graceTimer = null;
      this._settle = (err) => {
        if (done) return;
        done = true;
        this._settle = null;
        if (graceTimer !== null) this._clock.clearTimeout(graceTimer);
        if (err) reject(err); else resolve(this);
      };
      call.on('data', (ev) => { if (call === this._call) this._onEvent(ev); });
      call.on('error', () => {}); // the status below says it all
      call.on('status', (st) => {
        // Let messages still buffered in the stream be handled first.
        setImmediate(() => { if (call === this._call) this._onEnd(st); });
      });
      graceTimer = this._clock.setTimeout(() => {
        graceTimer = null;
        if (done) return;
        const err = new TurnstileError(Status.DEADLINE_EXCEEDED,
          `no answer from ${this._client.target} within ${waitTimeout + graceMs} ms`);
        this._settle(err);
        call.cancel();
      }, waitTimeout + graceMs);
      call.write({ open: { ...open, waitTimeout: toDuration(waitTimeout) } });
    });
  }

  _onEvent(ev) {
    const now = this._clock.now();
    switch (ev.type) {
      case 'QUEUED': {
        if (this.state !== WAITING) return;
        const q = ev.queued || {};
        this.position = Number(q.position);
        this.ahead = Number(q.ahead);
        this.emit('queued', { position: this.position, ahead: this.ahead });
        return;
      }
      case 'ACQUIRED': {
        if (this.state !== WAITING) return;
        const a = ev.acquired || {};
        this.leaseId = a.leaseId;
        this.fencingToken = BigInt(a.fencingToken || 0);
        this.sessionTimeout = fromDuration(a.sessionTimeout);
        this.state = HELD;
        if (this._ttl > 0) {
          const valid = a.validFor ? fromDuration(a.validFor) : this._ttl;
          this._leaseValidUntil = now + valid;
        }
        const rw = fromDuration(a.refreshWithin);
        if (rw && rw > 0) {
          this._refreshWithin = rw;
          this._refreshDue = now + rw;
          this.validUntil = now + (fromDuration(a.safeFor) || 0);
        }
        this.emit('acquired');
        if (this._settle) this._settle(null);
        if (this._ttl > 0) this._scheduleRenew();
        this._armWatchdog();
        return;
      }
      case 'STILL_HELD': {
        if ((this.state !== HELD && this.state !== SUSPENDED) || this._refreshWithin <= 0) return;
        const s = ev.stillHeld || {};
        this._refreshWithin = Math.max(fromDuration(s.refreshWithin) || 0, 1);
        this._refreshDue = now + this._refreshWithin;
        this.validUntil = now + (fromDuration(s.safeFor) || 0);
        if (this.state === SUSPENDED && this._silent) {
          this.state = HELD;
          this._silent = false;
          this.safeUntil = null;
          this.emit('resumed');
        }
        this._armWatchdog();
        return;
      }
      case 'SUSPENDED': {
        if (this.state !== HELD && this.state !== SUSPENDED) return;
        const was = this.state;
        this.state = SUSPENDED;
        this._silent = false;
        this.safeUntil = now + (fromDuration(ev.suspended && ev.suspended.safeFor) || 0);
        if (was === HELD) this.emit('suspended', { safeUntil: this.safeUntil, byWatchdog: false });
        this._armWatchdog();
        return;
      }
      case 'RESUMED': {
        if (this.state !== HELD && this.state !== SUSPENDED) return;
        const was = this.state;
        this.state = HELD;
        this._silent = false;
        this.safeUntil = null;
        if (this._refreshWithin > 0 && ev.stillHeld) {
          this._refreshWithin = Math.max(fromDuration(ev.stillHeld.refreshWithin) || 0, 1);
          this.validUntil = now + (fromDuration(ev.stillHeld.safeFor) || 0);
        }
        this._refreshDue = now + this._refreshWithin;
        if (was === SUSPENDED) this.emit('resumed');
        this._armWatchdog();
        return;
      }
      case 'LOST': {
        if (this.state !== HELD && this.state !== SUSPENDED) return;
        const l = ev.lost || {};
        const reason = l.reason && l.reason !== 'REASON_UNSPECIFIED' ? l.reason : 'UNSPECIFIED';
        this._finish(LOST, reason, l.message || '');
        return;
      }
      case 'REVOKE_REQUESTED': {
        if (this.state !== HELD && this.state !== SUSPENDED) return;
        const r = ev.revokeRequested || {};
        const req = { requester: r.requester || '', reason: r.reason || '' };
        this.revokeRequests.push(req);
        this.emit('revokeRequested', req);
        return;
      }
      case 'RELEASED': {
        if (this.state !== HELD && this.state !== SUSPENDED) return;
        this._finish(RELEASED);
        return;
      }
      default:
        // RELEASING (this client releases with a message) and newer types.
        return;
    }
  }

  _onEnd(st) {
    this._ended = true;
    if (this.state === WAITING) {
      this.state = FAILED;
      let err;
      if (!st || st.code === Status.OK) {
        err = new TurnstileError(Status.UNKNOWN, 'the Acquire stream ended without ACQUIRED');
      } else {
        err = TurnstileError.fromStatus(st);
      }
      if (this._aborted) err.aborted = true;
      if (this._settle) this._settle(err);
    } else if (this.state === HELD || this.state === SUSPENDED) {
      if (this._releasing) {
        this._finish(RELEASED);
      } else {
        const msg = !st || st.code === Status.OK
          ? 'the Acquire stream ended without RELEASED or LOST'
          : `the Acquire stream broke: ${codeName(st.code)}: ${st.details || ''}`;
        this._finish(LOST, 'CONNECTION', msg);
      }
    }
    const waiters = this._endWaiters;
    this._endWaiters = [];
    for (const w of waiters) w();
  }

  // A terminal state: stop the timers, tell the listeners.
  _finish(state, reason, message) {
    this.state = state;
    this._stopTimers();
    if (state === LOST) {
      this.lostReason = reason;
      this.lostMessage = message || '';
      this.emit('lost', { reason, message: this.lostMessage });
    } else {
      this.emit('released');
    }
    const waiters = this._endWaiters;
    this._endWaiters = [];
    for (const w of waiters) w();
  }

  _stopTimers() {
    if (this._wdTimer !== null) { this._clock.clearTimeout(this._wdTimer); this._wdTimer = null; }
    if (this._kaTimer !== null) { this._clock.clearTimeout(this._kaTimer); this._kaTimer = null; }
  }

  // ---- The careful-client watchdog ----
  // A frozen replica or a stalled stream sends nothing, not even LOST: when
  // no refresh comes within refresh_within the hold is SUSPENDED here, with
  // the validity the last refresh gave; when that (or a server SUSPENDED's
  // safe time) runs out it is LOST here and the stream is cancelled (a live
  // replica then deletes the node).
  _armWatchdog() {
    if (this._wdTimer !== null) { this._clock.clearTimeout(this._wdTimer); this._wdTimer = null; }
    const live = this.state === HELD || this.state === SUSPENDED;
    if (!live || this._ended || this._releasing) return;
    let due;
    if (this.state === HELD) {
      if (this._refreshWithin <= 0) return;
      due = this._refreshDue;
    } else {
      due = this.safeUntil !== null ? this.safeUntil : this._clock.now();
    }
    this._wdTimer = this._clock.setTimeout(() => {
      this._wdTimer = null;
      this._onWatchdog();
    }, Math.max(due - this._clock.now(), 0));
  }

  _onWatchdog() {
    const live = this.state === HELD || this.state === SUSPENDED;
    if (!live || this._ended || this._releasing) return;
    const now = this._clock.now();
    if (this.state === HELD && this._refreshWithin > 0 && now >= this._refreshDue) {
      this.state = SUSPENDED;
      this._silent = true;
      this.safeUntil = this.validUntil !== null ? this.validUntil : now;
      this.emit('suspended', { safeUntil: this.safeUntil, byWatchdog: true });
    } else if (this.state === SUSPENDED && now >= (this.safeUntil !== null ? this.safeUntil : now)) {
      const silent = this._silent;
      this._finish(LOST, silent ? 'REFRESH_OVERDUE' : 'SESSION_EXPIRED',
        silent ? 'no refresh from the replica before the hold\'s validity ran out'
          : 'the replica\'s safe time ran out before its ZooKeeper connection came back');
      if (this._call) this._call.cancel(); // a live replica deletes the node
      return;
    }
    this._armWatchdog();
  }

  // ---- KeepAlive for TTL leases: every ttl/3 ----
  _scheduleRenew() {
    const interval = Math.max(this._ttl / 3, 100);
    this._kaTimer = this._clock.setTimeout(async () => {
      this._kaTimer = null;
      if ((this.state !== HELD && this.state !== SUSPENDED) || this._releasing || this._ended) return;
      const sent = this._clock.now();
      try {
        const [st] = await this._client.keepAlive([this.leaseId], { timeout: interval });
        if (st && st.code === Status.OK) {
          const until = sent + (st.validFor || 0);
          if (this._leaseValidUntil === null || until > this._leaseValidUntil) this._leaseValidUntil = until;
        } else if (st && st.code === Status.NOT_FOUND) {
          return; // gone: the Acquire stream reports LOST
        }
      } catch (e) {
        // transient: try again next interval (the server says LOST if it expires)
      }
      if ((this.state === HELD || this.state === SUSPENDED) && !this._releasing && !this._ended) {
        this._scheduleRenew();
      }
    }, interval);
  }

  /**
   * Releases the lock and waits (up to `timeout` ms, default 10 s) for
   * RELEASED; if it does not come, cancels the stream (which also deletes
   * the node). Resolves true if released, false if the hold was already
   * lost. Idempotent.
   */
  async release({ timeout = 10000 } = {}) {
    if (this.state === RELEASED) return true;
    if (this.state === WAITING || (this.state === FAILED && this._looping)) {
      // Not granted yet: abandon the wait (acquire() rejects with CANCELLED).
      this._aborted = true;
      if (this._settle) this._settle(new TurnstileError(Status.CANCELLED, 'released before it was granted'));
      if (this._call) this._call.cancel();
      return false;
    }
    if (this.state === LOST || this.state === FAILED) return false;
    if (!this._releasing) {
      this._releasing = true;
      this._stopTimers();
      try {
        this._call.write({ release: {} });
      } catch (e) {
        // the stream is already gone: its end settles the state below
      }
    }
    if (!this._ended && this.state !== RELEASED && this.state !== LOST) {
      await new Promise((resolve) => {
        const h = this._clock.setTimeout(() => { this._call.cancel(); resolve(); }, timeout);
        this._endWaiters.push(() => { this._clock.clearTimeout(h); resolve(); });
      });
    }
    if (this.state === HELD || this.state === SUSPENDED) this._finish(RELEASED);
    try { this._call.end(); } catch (e) { /* already closed */ }
    return this.state === RELEASED;
  }
}

// ---- Client --------------------------------------------------------------

class Client {
  /**
   * @param {string} target gRPC target: "host:port", or several replicas,
   *   "ipv4:10.0.0.1:7400,10.0.0.2:7400".
   * @param {object} [options]
   */
  constructor(target, options = {}) {
    this.target = target;
    this.timeout = options.timeout === undefined ? 10000 : options.timeout;
    this.retryUnavailable = options.retryUnavailable !== false;
    this.defaultOwner = options.owner || '';
    this.graceMs = options.grace === undefined ? 15000 : options.grace;
    this._clock = options.clock || realClock;
    if (options.stub) {
      this._stub = options.stub; // tests
      return;
    }
    let creds = options.credentials || tlsCredentials({
      caFile: options.tlsCaFile, certFile: options.tlsCertFile, keyFile: options.tlsKeyFile,
    }, options.env || process.env);
    const channelOptions = { ...(options.channelOptions || {}) };
    if (creds && options.tlsServerName) {
      channelOptions['grpc.ssl_target_name_override'] = options.tlsServerName;
      channelOptions['grpc.default_authority'] = options.tlsServerName;
    }
    if (!creds) creds = grpc.credentials.createInsecure();
    const { LockService } = loadProto(options.protoDir);
    this._stub = new LockService(target, creds, channelOptions);
  }

  close() {
    if (this._stub && typeof this._stub.close === 'function') this._stub.close();
  }

  /**
   * Takes the lock `name`. Resolves with a held Hold; rejects with a
   * TurnstileError. The returned promise carries `.hold`, the Hold (waiting),
   * to listen for 'queued' before the grant.
   */
  acquire(name, opts = {}) {
    let built;
    try {
      built = buildOpen(name, opts, this.defaultOwner);
    } catch (e) {
      const p = Promise.reject(e);
      p.hold = null;
      return p;
    }
    const hold = new Hold(this, name, built.ttl);
    if (typeof opts.onQueued === 'function') hold.on('queued', opts.onQueued);
    if (typeof opts.onRevokeRequested === 'function') hold.on('revokeRequested', opts.onRevokeRequested);
    hold._looping = true;
    const p = this._acquireLoop(hold, built, opts.signal);
    const done = () => { hold._looping = false; };
    p.then(done, done);
    p.hold = hold;
    return p;
  }

  async _acquireLoop(hold, built, signal) {
    const clock = this._clock;
    const end = clock.now() + built.waitTimeout;
    let waitTimeout = built.waitTimeout;
    let backoff = FIRST_BACKOFF_MS;
    if (signal && signal.aborted) throw abortError(signal);
    for (;;) {
      let onAbort = null;
      if (signal) {
        onAbort = () => {
          hold._aborted = true;
          if (hold._settle) hold._settle(abortError(signal));
          if (hold._call) hold._call.cancel();
        };
        signal.addEventListener('abort', onAbort, { once: true });
      }
      try {
        return await hold._attempt(built.open, waitTimeout, this.graceMs);
      } catch (e) {
        if (hold._call && hold.state === WAITING) hold._call.cancel();
        if (hold._aborted) {
          throw signal && signal.aborted ? abortError(signal) : e;
        }
        // CANCELLED here comes from the server side (a replica that shuts
        // down cancels the calls it still has): retried too.
        if (!retryable(e) || !this.retryUnavailable || built.waitTimeout <= 0 ||
            clock.now() + backoff >= end) {
          throw e;
        }
      } finally {
        if (signal && onAbort) signal.removeEventListener('abort', onAbort);
      }
      await sleep(clock, backoff, signal);
      if (hold._aborted) throw new TurnstileError(Status.CANCELLED, 'released before it was granted');
      backoff = nextBackoff(backoff);
      waitTimeout = Math.max(end - clock.now(), 1);
    }
  }

  _unary(method, request) {
    return new Promise((resolve, reject) => {
      const deadline = new Date(Date.now() + this.timeout);
      this._stub[method](request, { deadline }, (err, resp) => {
        if (err) reject(TurnstileError.fromStatus(err)); else resolve(resp);
      });
    });
  }

  async _found(method, request) {
    try {
      await this._unary(method, request);
      return true;
    } catch (e) {
      if (e.code === Status.NOT_FOUND) return false;
      throw e;
    }
  }

  /** Releases a lease by id (any replica): true if released, false if it
   * was already gone (NOT_FOUND). */
  release(leaseId) {
    return this._found('Release', { leaseId });
  }

  /** Asks the holder of a lease to let go; it decides. True if asked,
   * false if the lease is gone. */
  revoke(leaseId, { reason = '', requester } = {}) {
    return this._found('Revoke', {
      leaseId, reason, requester: requester === undefined ? this.defaultOwner : requester,
    });
  }

  /** Holders and waiters of `name` in queue order; null if nobody holds or
   * waits for it. */
  async describe(name) {
    let r;
    try {
      r = await this._unary('Describe', { name });
    } catch (e) {
      if (e.code === Status.NOT_FOUND) return null;
      throw e;
    }
    return {
      name: r.name,
      maxHolders: r.maxHolders || 0,
      delayedUntil: tsToDate(r.delayedUntil),
      holders: (r.holders || []).map(contender),
      waiters: (r.waiters || []).map(contender),
    };
  }

  /**
   * Asks whether `fencingToken` still belongs to a hold of the lock `name`
   * (Chubby's CheckSequencer), for a resource server that cannot remember
   * the highest token it has seen: accept a write only when the verdict is
   * 'CURRENT'. Resolves with { verdict: 'CURRENT' | 'SUPERSEDED' |
   * 'WAITING', highestHolderToken (bigint, 0n if the lock has no holder),
   * linearizable }. By default the answer reflects every grant and release
   * announced before the call; `allowStale` skips the replica's ZooKeeper
   * sync (cheaper, may miss the last moments' changes). Rejects with
   * TurnstileError: INVALID_ARGUMENT (empty or malformed name, token 0),
   * PERMISSION_DENIED, UNAVAILABLE (the answer is unknown: refuse the write
   * or ask again).
   */
  async checkToken(name, fencingToken, { allowStale = false } = {}) {
    if (typeof name !== 'string') throw invalid('name must be a string');
    if (typeof fencingToken !== 'bigint' && typeof fencingToken !== 'number' && typeof fencingToken !== 'string') {
      throw invalid('fencingToken must be a bigint');
    }
    const r = await this._unary('CheckToken', {
      name, fencingToken: String(fencingToken), allowStale: Boolean(allowStale),
    });
    if (!VERDICTS.has(r.verdict)) {
      throw new TurnstileError(Status.UNKNOWN, `CheckToken: unknown verdict ${r.verdict}`);
    }
    return {
      verdict: r.verdict,
      highestHolderToken: BigInt(r.highestHolderToken || 0),
      linearizable: Boolean(r.linearizable),
    };
  }

  /**
   * Replaces the metadata of a hold by lease id and fencing token, keeping
   * the hold. Rejects with TurnstileError: NOT_FOUND (the lease is gone),
   * FAILED_PRECONDITION (the token is not this lease's: stale),
   * INVALID_ARGUMENT (malformed id, token 0, metadata limits).
   */
  async proclaim(leaseId, fencingToken, metadata = {}) {
    if (typeof leaseId !== 'string') throw invalid('leaseId must be a string');
    if (typeof fencingToken !== 'bigint' && typeof fencingToken !== 'number' && typeof fencingToken !== 'string') {
      throw invalid('fencingToken must be a bigint');
    }
    await this._unary('Proclaim', { leaseId, fencingToken: String(fencingToken), metadata: { ...metadata } });
  }

  /**
   * Follows the leader (first holder) of `name`: an Observation, an
   * EventEmitter ('change', 'error', 'close') and async iterator of items
   * { kind: 'leader'|'none'|'unknown', leader, ... }, observing again by
   * itself after UNAVAILABLE (see observe.js). close() it when done.
   */
  observe(name, opts = {}) {
    if (typeof name !== 'string' || name === '') throw invalid('name must be a non-empty string');
    const { Observation } = require('./observe');
    return new Observation(this, name, opts);
  }

  /**
   * The current leader of `name` once (the first CURRENT state of an
   * Observe): { value, owner, identity, fencingToken, granted, since,
   * metadata }, or null when nobody holds it. Waits through 'unknown' up to
   * `timeout` ms (default: the client's) and rejects DEADLINE_EXCEEDED.
   */
  leader(name, { timeout } = {}) {
    const ms = timeout === undefined ? this.timeout : timeout;
    return new Promise((resolve, reject) => {
      let obs;
      try {
        obs = this.observe(name);
      } catch (e) {
        reject(e);
        return;
      }
      let last = '';
      const timer = this._clock.setTimeout(() => {
        obs.close();
        reject(new TurnstileError(Status.DEADLINE_EXCEEDED,
          `the leader of ${JSON.stringify(name)} stayed unknown for ${ms} ms (${last || 'no state received'})`));
      }, ms);
      obs.on('change', (item) => {
        if (item.kind === 'unknown') { last = item.message; return; }
        this._clock.clearTimeout(timer);
        obs.close();
        resolve(item.leader);
      });
      obs.on('error', (e) => {
        this._clock.clearTimeout(timer);
        reject(e);
      });
    });
  }

  /**
   * Takes every lock of `names` all-or-nothing under one deadline
   * (opts.waitTimeout, default 60000 ms), in canonical (UTF-8 byte) order;
   * resolves with a MultiHold (see multilock.js). The other options are
   * acquire()'s (owner, metadata, ttl, signal, ...), for every lock.
   */
  acquireAll(names, opts = {}) {
    const { acquireAll } = require('./multilock');
    const { waitTimeout = 60000, ...rest } = opts || {};
    return acquireAll((name, wait) => this.acquire(name, { ...rest, waitTimeout: wait }), names,
      { waitTimeout, clock: this._clock });
  }

  /** Names of locks with holders or waiters, in byte order. */
  async list(prefix = '', { limit = 0 } = {}) {
    const r = await this._unary('List', { prefix, limit });
    return { names: r.names || [], truncated: Boolean(r.truncated) };
  }

  /** Renews leases (opened with ttl > 0) once; one status per id. */
  keepAlive(leaseIds, { timeout } = {}) {
    return new Promise((resolve, reject) => {
      const deadline = new Date(Date.now() + (timeout || this.timeout));
      const call = this._stub.KeepAlive({ deadline });
      let done = false;
      call.on('data', (resp) => {
        if (done) return;
        done = true;
        call.cancel();
        resolve((resp.leases || []).map((s) => ({
          leaseId: s.leaseId, code: s.code, codeName: codeName(s.code), message: s.message,
          validFor: fromDuration(s.validFor) || 0,
        })));
      });
      call.on('error', (err) => {
        if (done) return;
        done = true;
        reject(TurnstileError.fromStatus(err));
      });
      call.on('status', (st) => setImmediate(() => {
        if (done) return;
        done = true;
        reject(new TurnstileError(st.code === Status.OK ? Status.UNKNOWN : st.code,
          st.details || 'KeepAlive ended without a response'));
      }));
      call.write({ leaseIds });
      call.end();
    });
  }
}

function tsToDate(ts) {
  if (!ts) return null;
  return new Date(Number(ts.seconds || 0) * 1000 + Math.floor((ts.nanos || 0) / 1e6));
}

/** CheckToken's verdicts (CheckTokenResponse.Verdict names). */
const VERDICTS = new Set(['CURRENT', 'SUPERSEDED', 'WAITING']);

function contender(c) {
  return {
    owner: c.owner,
    metadata: { ...(c.metadata || {}) },
    since: tsToDate(c.since),
    granted: tsToDate(c.granted),
    fencingToken: BigInt(c.fencingToken || 0),
    replicaId: c.replicaId,
    position: Number(c.position || 0),
    kind: (c.kind || 'LOCK_KIND_UNSPECIFIED').replace('LOCK_KIND_', '').toLowerCase(),
    maxHolders: c.maxHolders || 0,
    identity: c.identity || '',
    revokeRequests: Number(c.revokeRequests || 0),
    revokeRequester: c.revokeRequester || '',
    revokeReason: c.revokeReason || '',
  };
}

module.exports = {
  Client,
  Hold,
  TurnstileError,
  Status,
  codeName,
  tlsCredentials,
  loadProto,
  protoRoot,
  // for tests and advanced use
  _internal: { buildOpen, nextBackoff, FIRST_BACKOFF_MS, toDuration, fromDuration, realClock, sleep, contender },
};

// Election, Observation and the multi-lock are built on the above (they
// require this module, whose exports are complete by now).
const { Observation } = require('./observe');
const { Election, requeueUntil } = require('./election');
const { acquireAll, canonicalOrder, MultiHold } = require('./multilock');

Object.assign(module.exports, { Observation, Election, requeueUntil, acquireAll, canonicalOrder, MultiHold });
