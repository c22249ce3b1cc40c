#!/usr/bin/env node
'use strict';
// Takes a lock, shows its fencing token, holds it for a moment, releases it.
//   node client/node/example.js --server 127.0.0.1:7400 my-lock
const { Client } = require('.');

async function main() {
  const argv = process.argv.slice(2);
  const i = argv.indexOf('--server');
  const server = i >= 0 ? argv.splice(i, 2)[1] : '127.0.0.1:7400';
  const name = argv[0] || 'my-lock';
  const client = new Client(server, { owner: 'node-example' });
  const ac = new AbortController();
  process.once('SIGINT', () => ac.abort()); // Ctrl-C abandons the wait
  const pending = client.acquire(name, { waitTimeout: 30000, ttl: 10000, signal: ac.signal });
  pending.hold.on('queued', ({ position }) => console.log(`waiting: position ${position}`));
  const hold = await pending;
  hold.on('suspended', () => console.log('in doubt: stop writing until resumed'));
  hold.on('lost', ({ reason }) => console.log(`lost (${reason})`));
  hold.on('revokeRequested', async ({ requester, reason }) => {
    console.log(`${requester} asks us to let go: ${reason}`);
    await hold.release();
  });
  console.log(`holding ${name}: fencing token ${hold.fencingToken}, lease ${hold.leaseId}`);
  const d = await client.describe(name);
  console.log(`holders: ${d.holders.map((h) => h.owner).join(', ')}`);
  await new Promise((resolve) => setTimeout(resolve, 1000)); // the work, done under the lock
  console.log(`released: ${await hold.release()}`);
  client.close();
}

main().catch((e) => {
  console.error(`${e.codeName || 'error'}: ${e.message}`);
  process.exit(1);
});
