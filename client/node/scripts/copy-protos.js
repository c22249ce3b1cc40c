'use strict';
// npm pack / publish: copies the repository's protos/ (the contract) into the
// package, where index.js looks first. In the repository, index.js reads
// ../../protos directly, so nothing else needs this.
const fs = require('fs');
const path = require('path');

const src = path.join(__dirname, '..', '..', '..', 'protos');
const dst = path.join(__dirname, '..', 'protos');
if (!fs.existsSync(path.join(src, 'turnstile', 'v1', 'lock.proto'))) {
  console.error(`copy-protos: ${src}/turnstile/v1/lock.proto not found`);
  process.exit(1);
}
fs.rmSync(dst, { recursive: true, force: true });
fs.cpSync(src, dst, { recursive: true, filter: (p) => fs.statSync(p).isDirectory() || p.endsWith('.proto') });
console.log(`copy-protos: ${src} -> ${dst}`);
