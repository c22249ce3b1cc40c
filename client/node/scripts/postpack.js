'use strict';
// Runs after `npm pack` / `npm publish` (the "postpack" script): removes the
// copies scripts/prepack.js made, when the package sits in the repository
// (../../protos exists). In the repository index.js then reads ../../protos
// again, never a copy that a later change to the contract left stale.
const fs = require('fs');
const path = require('path');

const pkg = path.join(__dirname, '..');
const top = path.join(pkg, '..', '..');
if (fs.existsSync(path.join(top, 'protos', 'turnstile', 'v1', 'lock.proto'))) {
  fs.rmSync(path.join(pkg, 'protos'), { recursive: true, force: true });
  if (fs.existsSync(path.join(top, 'LICENSE'))) fs.rmSync(path.join(pkg, 'LICENSE'), { force: true });
}
