// Take-home consumer of the Node.js client, CommonJS: takes the lock
// "take-home/node", prints its fencing token, releases it.
const { Client } = require('turnstile-client');

async function main() {
  const client = new Client('127.0.0.1:7400');
  try {
    const hold = await client.acquire('take-home/node', { waitTimeout: 30000 });
    console.log(`fencing_token=${hold.fencingToken}`);
    await hold.release();
  } finally {
    client.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
