#!/usr/bin/env node
'use strict';
// The conformance runner for the Node.js client library (issue 22).
//
// Reads commands (JSON lines) on stdin, drives client/node (turnstile-client)
// and writes events (JSON lines) on stdout; the protocol is in
// tests/conformance/README.md. Every command runs concurrently: an acquire is
// a promise of its own, and the hold's events are written as they happen.
const path = require('path');
const readline = require('readline');

const { Client, TurnstileError, codeName } = require(path.join(__dirname, '..', '..', 'client', 'node'));

function say(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

function errCode(e) {
  if (e instanceof TurnstileError) return e.codeName;
  return 'UNKNOWN';
}

function parseArgs(argv) {
  const args = { server: null, owner: '' };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--server') args.server = argv[++i];
    else if (argv[i] === '--owner') args.owner = argv[++i];
  }
  if (!args.server) {
    process.stderr.write('usage: runner_node.js --server TARGET --owner NAME\n');
    process.exit(2);
  }
  return args;
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const client = new Client(args.server, { owner: args.owner });
  const holds = new Map(); // hold name -> Hold (granted)

  function acquire(cmd) {
    const h = cmd.hold;
    const opts = {
      waitTimeout: cmd.wait_ms === undefined ? 10000 : cmd.wait_ms,
      ttl: cmd.ttl_ms || 0,
      owner: cmd.owner === undefined ? args.owner : cmd.owner,
      metadata: cmd.metadata,
      kind: cmd.kind || 'exclusive',
      maxHolders: cmd.kind === 'semaphore' ? cmd.max_holders || 0 : 0,
      lockDelay: cmd.lock_delay_ms || 0,
      revokeHolders: Boolean(cmd.revoke_holders),
      revokeReason: cmd.revoke_reason || '',
    };
    const p = client.acquire(cmd.lock, opts);
    const hold = p.hold;
    if (hold) {
      hold.on('queued', ({ position }) => say({ hold: h, event: 'queued', position }));
      hold.on('acquired', () => {
        holds.set(h, hold);
        say({ hold: h, event: 'acquired', token: hold.fencingToken.toString(), lease_id: hold.leaseId });
      });
      hold.on('suspended', () => say({ hold: h, event: 'suspended' }));
      hold.on('resumed', () => say({ hold: h, event: 'resumed' }));
      hold.on('lost', ({ reason, message }) => say({ hold: h, event: 'lost', reason, message }));
      hold.on('revokeRequested', ({ requester, reason }) =>
        say({ hold: h, event: 'revoke_requested', requester, reason }));
      hold.on('released', () => say({ hold: h, event: 'released' }));
    }
    p.catch((e) => say({ hold: h, event: 'error', code: errCode(e), message: String(e && e.message) }));
  }

  function release(cmd) {
    const hold = holds.get(cmd.hold);
    if (!hold) {
      say({ hold: cmd.hold, event: 'error', code: 'NOT_HELD',
        message: 'release of a hold this client does not have' });
      return;
    }
    hold.release().catch(() => {}); // the hold's events say RELEASED (or LOST)
  }

  async function unary(cmd) {
    const req = cmd.req;
    try {
      if (cmd.cmd === 'describe') {
        const d = await client.describe(cmd.lock);
        if (d === null) {
          say({ req, error: 'NOT_FOUND' });
          return;
        }
        say({ req, holders: d.holders.map((c) => c.owner), waiters: d.waiters.map((c) => c.owner),
          holder_identities: d.holders.map((c) => c.identity), max_holders: d.maxHolders });
      } else if (cmd.cmd === 'list') {
        const r = await client.list(cmd.prefix || '');
        say({ req, names: r.names });
      } else if (cmd.cmd === 'revoke') {
        const found = await client.revoke(cmd.lease_id, { reason: cmd.reason || '', requester: args.owner });
        say(found ? { req, ok: true } : { req, error: 'NOT_FOUND' });
      } else if (cmd.cmd === 'check') {
        const r = await client.checkToken(cmd.lock, BigInt(cmd.token), { allowStale: Boolean(cmd.stale) });
        say({ req, verdict: r.verdict, highest_holder_token: r.highestHolderToken.toString(),
          linearizable: r.linearizable });
      }
    } catch (e) {
      say({ req, error: errCode(e), message: String(e && e.message) });
    }
  }

  async function quit() {
    await Promise.all([...holds.values()].map((h) => h.release({ timeout: 2000 }).catch(() => {})));
    client.close();
    process.exit(0);
  }

  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  let quitting = false;
  rl.on('line', (line) => {
    line = line.trim();
    if (!line || quitting) return;
    let cmd;
    try {
      cmd = JSON.parse(line);
    } catch (e) {
      say({ event: 'error', code: 'UNKNOWN_COMMAND', message: line });
      return;
    }
    switch (cmd.cmd) {
      case 'quit':
        quitting = true;
        quit();
        return;
      case 'acquire':
        acquire(cmd);
        return;
      case 'release':
        release(cmd);
        return;
      case 'describe':
      case 'list':
      case 'revoke':
      case 'check':
        unary(cmd);
        return;
      default:
        say({ event: 'error', code: 'UNKNOWN_COMMAND', message: line });
    }
  });
  rl.on('close', () => { if (!quitting) { quitting = true; quit(); } });
  say({ event: 'ready', lang: 'node' });
}

void codeName;
main();
