'use strict';
// Runs before `npm pack` / `npm publish` (the "prepack" script): copies into
// the package what it needs from the rest of the repository:
//   ../../protos/**/*.proto  -> protos/   (the contract; index.js loads
//                                          protos/turnstile/v1/lock.proto)
//   ../../LICENSE            -> LICENSE   (Apache-2.0, packed by npm)
// Both copies are ignored by git, and scripts/postpack.js removes them
// after packing: in the repository index.js reads ../../protos directly.
// Packing again from an unpacked package (no repository around it) keeps
// the copies it has.
const fs = require('fs');
const path = require('path');

const pkg = path.join(__dirname, '..');
const top = path.join(pkg, '..', '..');
const LOCK_PROTO = path.join('turnstile', 'v1', 'lock.proto');

function fail(msg) {
  console.error(`prepack: ${msg}`);
  process.exit(1);
}

const srcProtos = path.join(top, 'protos');
const dstProtos = path.join(pkg, 'protos');
if (fs.existsSync(path.join(srcProtos, LOCK_PROTO))) {
  fs.rmSync(dstProtos, { recursive: true, force: true });
  fs.cpSync(srcProtos, dstProtos, {
    recursive: true,
    filter: (p) => fs.statSync(p).isDirectory() || p.endsWith('.proto'),
  });
  console.error(`prepack: ${srcProtos} -> ${dstProtos}`);
} else if (!fs.existsSync(path.join(dstProtos, LOCK_PROTO))) {
  fail(`${path.join(srcProtos, LOCK_PROTO)} not found, and the package has no protos/`);
}

const srcLicense = path.join(top, 'LICENSE');
const dstLicense = path.join(pkg, 'LICENSE');
if (fs.existsSync(srcLicense)) {
  fs.copyFileSync(srcLicense, dstLicense);
  console.error(`prepack: ${srcLicense} -> ${dstLicense}`);
} else if (!fs.existsSync(dstLicense)) {
  fail(`${srcLicense} not found, and the package has no LICENSE`);
}
