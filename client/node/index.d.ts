// Type declarations for turnstile-client (hand-written; the public API of index.js).
import { EventEmitter } from 'events';
import type { ChannelCredentials, ChannelOptions } from '@grpc/grpc-js';

/** gRPC status code numbers (grpc.status of @grpc/grpc-js). */
export declare const Status: {
  readonly OK: 0; readonly CANCELLED: 1; readonly UNKNOWN: 2; readonly INVALID_ARGUMENT: 3;
  readonly DEADLINE_EXCEEDED: 4; readonly NOT_FOUND: 5; readonly ALREADY_EXISTS: 6;
  readonly PERMISSION_DENIED: 7; readonly RESOURCE_EXHAUSTED: 8; readonly FAILED_PRECONDITION: 9;
  readonly ABORTED: 10; readonly OUT_OF_RANGE: 11; readonly UNIMPLEMENTED: 12; readonly INTERNAL: 13;
  readonly UNAVAILABLE: 14; readonly DATA_LOSS: 15; readonly UNAUTHENTICATED: 16;
};

export type CodeName =
  | 'OK' | 'CANCELLED' | 'UNKNOWN' | 'INVALID_ARGUMENT' | 'DEADLINE_EXCEEDED' | 'NOT_FOUND'
  | 'ALREADY_EXISTS' | 'PERMISSION_DENIED' | 'RESOURCE_EXHAUSTED' | 'FAILED_PRECONDITION'
  | 'ABORTED' | 'OUT_OF_RANGE' | 'UNIMPLEMENTED' | 'INTERNAL' | 'UNAVAILABLE' | 'DATA_LOSS'
  | 'UNAUTHENTICATED';

/** The name of a gRPC status code number, e.g. 9 -> "FAILED_PRECONDITION". */
export declare function codeName(code: number): CodeName | string;

/** Every failed call rejects with this. */
export declare class TurnstileError extends Error {
  constructor(code: number, details?: string, options?: { cause?: unknown });
  readonly name: 'TurnstileError';
  /** The gRPC status code number (e.g. 9). */
  readonly code: number;
  /** Its name (e.g. "FAILED_PRECONDITION"). */
  readonly codeName: CodeName | string;
  /** The server's (or the client's) message. */
  readonly details: string;
}

/** Time source for the watchdog, renewals and retry backoff (ms). */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export interface ClientOptions {
  /** Deadline of the unary calls (Release, Describe, List, Revoke, KeepAlive), ms. Default 10000. */
  timeout?: number;
  /** Retry an acquire that ends UNAVAILABLE (or CANCELLED by a replica shutting down)
   * with backoff 50 ms doubling to 1 s until its wait timeout. Default true. */
  retryUnavailable?: boolean;
  /** Owner recorded on every acquire that does not name one. */
  owner?: string;
  /** Extra time past the wait timeout to wait for the server's answer, ms. Default 15000. */
  grace?: number;
  /** Channel credentials; default: from the TLS files below, else plaintext. */
  credentials?: ChannelCredentials;
  /** PEM files. With none given, TURNSTILE_TLS_CA_FILE, TURNSTILE_TLS_CERT_FILE and
   * TURNSTILE_TLS_KEY_FILE are read (unset: plaintext), like the CLI. */
  tlsCaFile?: string;
  tlsCertFile?: string;
  tlsKeyFile?: string;
  /** The name the server's certificate carries when it is not the target's host. */
  tlsServerName?: string;
  /** Environment to read the TLS variables from (default process.env). */
  env?: Record<string, string | undefined>;
  channelOptions?: ChannelOptions;
  /** Directory holding turnstile/v1/lock.proto (default: the package's, or the repo's protos/). */
  protoDir?: string;
  /** Injected clock (tests). */
  clock?: Clock;
}

export type LockKind = 'exclusive' | 'shared' | 'semaphore';

export interface AcquireOptions {
  /** How long to wait, ms. 0 = try once (FAILED_PRECONDITION if held). Default 60000. */
  waitTimeout?: number;
  /** Lease TTL, ms: 0 (default) = held while the stream is open; else 500 ms..max,
   * renewed automatically with KeepAlive every ttl/3. */
  ttl?: number;
  /** Cancels the wait (rejects with TurnstileError CANCELLED). */
  signal?: AbortSignal;
  owner?: string;
  /** Shown by describe: at most 16 entries. */
  metadata?: Record<string, string>;
  /** Default exclusive; semaphore when maxHolders > 0. */
  kind?: LockKind;
  /** A semaphore's N (every contender of the name must ask the same N). */
  maxHolders?: number;
  /** Lock-delay, ms (0..60000): after an involuntary end the next grant waits this long. */
  lockDelay?: number;
  /** Once queued, ask the holders ahead to let go. */
  revokeHolders?: boolean;
  revokeReason?: string;
  /** Shorthands for hold.on('queued') / hold.on('revokeRequested'). */
  onQueued?: (q: QueuedInfo) => void;
  onRevokeRequested?: (r: RevokeInfo) => void;
}

export interface QueuedInfo { position: number; ahead: number; }
export interface SuspendedInfo {
  /** clock.now() (performance.now()) ms until which the hold is certainly still held. */
  safeUntil: number;
  /** true: the replica went silent (no refresh within refresh_within); false: the replica said SUSPENDED. */
  byWatchdog: boolean;
}
export type LostReason =
  | 'SESSION_EXPIRED' | 'LEASE_EXPIRED' | 'DELETED' | 'SHUTDOWN' | 'CONNECTION' | 'REFRESH_OVERDUE'
  | 'UNSPECIFIED';
export interface LostInfo { reason: LostReason | string; message: string; }
export interface RevokeInfo { requester: string; reason: string; }

export type HoldState = 'waiting' | 'held' | 'suspended' | 'lost' | 'released' | 'failed';

export declare class Hold extends EventEmitter {
  readonly name: string;
  readonly state: HoldState;
  /** True while certainly held (state 'held'). */
  readonly held: boolean;
  /** Pass to Client.release / revoke / keepAlive on any replica. */
  readonly leaseId: string | null;
  /** The fencing token (uint64): pass it to the protected resource. */
  readonly fencingToken: bigint | null;
  /** The replica's ZooKeeper session timeout, ms. */
  readonly sessionTimeout: number | null;
  /** Milliseconds the hold is still known valid (0 once lost or released). */
  readonly validFor: number;
  readonly position: number | null;
  readonly lostReason: string | null;
  readonly lostMessage: string;
  readonly revokeRequests: RevokeInfo[];
  /** Releases (waits up to timeout ms for RELEASED, then cancels the stream).
   * Resolves true if released, false if the hold was already lost. */
  release(options?: { timeout?: number }): Promise<boolean>;

  on(event: 'queued', listener: (q: QueuedInfo) => void): this;
  on(event: 'acquired', listener: () => void): this;
  on(event: 'suspended', listener: (s: SuspendedInfo) => void): this;
  on(event: 'resumed', listener: () => void): this;
  on(event: 'lost', listener: (l: LostInfo) => void): this;
  on(event: 'revokeRequested', listener: (r: RevokeInfo) => void): this;
  on(event: 'released', listener: () => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
  once(event: 'queued', listener: (q: QueuedInfo) => void): this;
  once(event: 'acquired', listener: () => void): this;
  once(event: 'suspended', listener: (s: SuspendedInfo) => void): this;
  once(event: 'resumed', listener: () => void): this;
  once(event: 'lost', listener: (l: LostInfo) => void): this;
  once(event: 'revokeRequested', listener: (r: RevokeInfo) => void): this;
  once(event: 'released', listener: () => void): this;
  once(event: string | symbol, listener: (...args: any[]) => void): this;
}

/** acquire()'s promise also carries the (waiting) Hold, for 'queued' listeners. */
export interface AcquirePromise extends Promise<Hold> {
  readonly hold: Hold | null;
}

export interface Contender {
  owner: string;
  metadata: Record<string, string>;
  since: Date | null;
  granted: Date | null;
  fencingToken: bigint;
  replicaId: string;
  position: number;
  kind: 'unspecified' | LockKind;
  maxHolders: number;
  identity: string;
  revokeRequests: number;
  revokeRequester: string;
  revokeReason: string;
}

export interface Description {
  name: string;
  maxHolders: number;
  delayedUntil: Date | null;
  holders: Contender[];
  waiters: Contender[];
}

export interface LeaseStatus {
  leaseId: string;
  code: number;
  codeName: CodeName | string;
  message: string;
  /** ms */
  validFor: number;
}

/** CheckToken's answer. */
export interface TokenCheck {
  /** CURRENT: a hold with this token exists; SUPERSEDED: its hold is gone (never current again);
   * WAITING: a contender that was never granted. */
  verdict: 'CURRENT' | 'SUPERSEDED' | 'WAITING';
  /** The highest fencing token among the lock's holders (0n if none). */
  highestHolderToken: bigint;
  /** False when allowStale skipped the replica's ZooKeeper sync. */
  linearizable: boolean;
}

export declare class Client {
  /** target: "host:port", or several replicas: "ipv4:10.0.0.1:7400,10.0.0.2:7400". */
  constructor(target: string, options?: ClientOptions);
  readonly target: string;
  acquire(name: string, options?: AcquireOptions): AcquirePromise;
  /** Releases by lease id: true if released, false if already gone. */
  release(leaseId: string): Promise<boolean>;
  /** Asks a holder to let go: true if asked, false if the lease is gone. */
  revoke(leaseId: string, options?: { reason?: string; requester?: string }): Promise<boolean>;
  /** null if nobody holds or waits for the lock. */
  describe(name: string): Promise<Description | null>;
  list(prefix?: string, options?: { limit?: number }): Promise<{ names: string[]; truncated: boolean }>;
  keepAlive(leaseIds: string[], options?: { timeout?: number }): Promise<LeaseStatus[]>;
  /** Replaces a hold's metadata by lease id and fencing token, keeping the hold. Rejects
   * NOT_FOUND (lease gone), FAILED_PRECONDITION (not this lease's token), INVALID_ARGUMENT. */
  proclaim(leaseId: string, fencingToken: bigint, metadata?: Record<string, string>): Promise<void>;
  /** Whether a fencing token still belongs to a hold of the lock (accept a write only when
   * CURRENT). Linearizable unless allowStale. Rejects INVALID_ARGUMENT (bad name, token 0),
   * PERMISSION_DENIED, UNAVAILABLE (the answer is unknown). */
  checkToken(name: string, fencingToken: bigint, options?: { allowStale?: boolean }): Promise<TokenCheck>;
  /** Follows the leader (first holder) of a lock; observes again by itself after UNAVAILABLE. */
  observe(name: string, options?: ObserveOptions): Observation;
  /** The current leader once (null: nobody holds it); DEADLINE_EXCEEDED if it stays unknown. */
  leader(name: string, options?: { timeout?: number }): Promise<Leader | null>;
  /** Takes every lock all-or-nothing under one deadline, in UTF-8 byte order of the names.
   * The other options are acquire()'s, for every lock. */
  acquireAll(names: string[], options?: AcquireOptions): Promise<MultiHold>;
  close(): void;
}

// ---- Election, Observe, multi-lock -------------------------------------------

export interface Leader {
  /** metadata.value (the election convention), null if the holder has none. */
  value: string | null;
  owner: string;
  /** The verified identity (mutual TLS), else "". */
  identity: string;
  /** The term: greater for every later leader. */
  fencingToken: bigint;
  granted: Date | null;
  since: Date | null;
  metadata: Record<string, string>;
}

export interface LeaderItem {
  /** 'unknown': the replica has no ZooKeeper connection, or the stream is being opened again. */
  kind: 'leader' | 'none' | 'unknown';
  leader: Leader | null;
  holders: Contender[];
  waiters: number;
  maxHolders: number;
  sequence: number;
  message: string;
}

export interface ObserveOptions {
  /** Only items whose leader (token, owner, metadata) or kind changed. Default true. */
  changesOnly?: boolean;
  /** Closes the observation. */
  signal?: AbortSignal;
}

export declare class Observation extends EventEmitter implements AsyncIterable<LeaderItem> {
  readonly name: string;
  readonly closed: boolean;
  /** Streams opened again after a failure. */
  readonly reopened: number;
  close(): void;
  [Symbol.asyncIterator](): AsyncIterator<LeaderItem>;
  on(event: 'change', listener: (item: LeaderItem) => void): this;
  on(event: 'error', listener: (err: TurnstileError) => void): this;
  on(event: 'close', listener: () => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
}

export interface Leadership {
  name: string;
  value: string;
  /** The term. */
  fencingToken: bigint;
  leaseId: string;
  owner: string;
}

export type LeadershipReason =
  | 'ACQUIRED' | 'RESUMED' | 'SUSPENDED' | 'IN_DOUBT' | 'RESIGNED' | LostReason | string;

export interface ElectionOptions {
  owner?: string;
  /** More metadata stored with the value (the key "value" is the election's). */
  metadata?: Record<string, string>;
  /** Also emitted as 'leadership'. */
  onLeadership?: (isLeader: boolean, reason: LeadershipReason) => void;
  /** Resign on REVOKE_REQUESTED. Default true. */
  resignOnRevoke?: boolean;
  ttl?: number;
  lockDelay?: number;
  /** The longest wait of one Acquire, ms (default 1 h; a replica's lower limit is learnt). */
  attemptWait?: number;
}

export declare class Election extends EventEmitter {
  constructor(client: Client, name: string, options?: ElectionOptions);
  readonly name: string;
  readonly owner: string;
  /** Resolves when this candidate leads; rejects only on its own timeout (DEADLINE_EXCEEDED),
   * bad input, PERMISSION_DENIED or the signal (CANCELLED). No timeout: until leader. */
  campaign(value: string, options?: { timeout?: number | null; signal?: AbortSignal }): Promise<Leadership>;
  /** True only while the hold is held and not in doubt. */
  isLeader(): boolean;
  readonly leadership: Leadership | null;
  proclaim(value: string): Promise<void>;
  /** Says (false, 'RESIGNED') first, then releases. */
  resign(): Promise<boolean>;
  observe(options?: ObserveOptions): Observation;
  leader(options?: { timeout?: number }): Promise<Leader | null>;
  on(event: 'leadership', listener: (isLeader: boolean, reason: LeadershipReason) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
}

export interface MultiHoldChange { name: string; reason: string; }

export declare class MultiHold extends EventEmitter {
  /** name -> Hold, in canonical order. */
  readonly holds: Map<string, Hold>;
  readonly state: 'held' | 'suspended' | 'lost' | 'released';
  readonly held: boolean;
  readonly fencingTokens: Map<string, bigint>;
  readonly leaseIds: Map<string, string>;
  readonly lostName: string | null;
  readonly lostReason: string | null;
  /** Releases every lock; true if the set was held until now. */
  release(options?: { timeout?: number }): Promise<boolean>;
  on(event: 'suspended' | 'resumed' | 'lost', listener: (c: MultiHoldChange) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
}

/** The names sorted by their UTF-8 bytes; INVALID_ARGUMENT for duplicates or bad names. */
export declare function canonicalOrder(names: string[]): string[];

/** Credentials from PEM files or the TURNSTILE_TLS_* variables; null = plaintext. */
export declare function tlsCredentials(
  files?: { caFile?: string; certFile?: string; keyFile?: string },
  env?: Record<string, string | undefined>): ChannelCredentials | null;

export declare function protoRoot(): string;
export declare function loadProto(root?: string): { LockService: unknown };
