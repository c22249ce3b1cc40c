'use strict';
// The package as npm packs it (no server): `npm pack --dry-run` from a copy
// of the repository's layout lists every file the library loads (the
// modules each packed module requires or imports, both entry points and
// their types, protos/ and LICENSE, copied in by scripts/prepack.js and
// removed again by scripts/postpack.js), and the ES module entry gives the
// CommonJS entry's objects as named exports.
const test = require('node:test');
const assert = require('node:assert');
const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const PKG = path.join(__dirname, '..');
const TOP = path.join(PKG, '..', '..');
const manifest = require('../package.json');

test('the manifest: Apache-2.0, publishable, CommonJS and ESM entries', () => {
  assert.strictEqual(manifest.license, 'Apache-2.0');
  assert.strictEqual(manifest.private, undefined);
  const root = manifest.exports['.'];
  assert.deepStrictEqual(root.require, { types: './index.d.ts', default: './index.js' });
  assert.deepStrictEqual(root.import, { types: './index.d.mts', default: './index.mjs' });
  assert.strictEqual(manifest.main, 'index.js');
});

function packedFiles() {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'turnstile-node-pack-test-'));
  try {
    const node = path.join(tmp, 'client', 'node');
    fs.cpSync(PKG, node, {
      recursive: true,
      filter: (p) => !['node_modules', 'protos', 'LICENSE'].includes(path.relative(PKG, p)) &&
        !p.endsWith('.tgz'),
    });
    fs.cpSync(path.join(TOP, 'protos'), path.join(tmp, 'protos'), { recursive: true });
    fs.copyFileSync(path.join(TOP, 'LICENSE'), path.join(tmp, 'LICENSE'));
    const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts=false',
      '--cache', path.join(tmp, 'npm-cache'), '--loglevel=error'],
    { cwd: node, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 60000 });
    const files = JSON.parse(out)[0].files.map((f) => f.path);
    // postpack removed what prepack copied in
    assert.ok(!fs.existsSync(path.join(node, 'protos')), 'postpack left protos/');
    assert.ok(!fs.existsSync(path.join(node, 'LICENSE')), 'postpack left LICENSE');
    return files;
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

test('npm pack carries everything the library loads', () => {
  const files = new Set(packedFiles());
  for (const f of ['package.json', 'LICENSE', 'README.md', 'index.js', 'index.mjs', 'index.d.ts',
    'index.d.mts', 'protos/turnstile/v1/lock.proto']) {
    assert.ok(files.has(f), `${f} is not packed: ${[...files].join(' ')}`);
  }
  for (const target of [manifest.main, manifest.types, ...Object.values(manifest.exports['.'])
    .flatMap((c) => Object.values(c))]) {
    assert.ok(files.has(path.posix.normalize(target)), `${target} (package.json) is not packed`);
  }
  // Every relative require / import of a packed module names a packed file.
  const local = /(?:require\(|from\s+|import\()\s*['"](\.{1,2}\/[^'"]*|\.)['"]/g;
  for (const f of files) {
    if (!/\.(c|m)?js$/.test(f)) continue;
    const text = fs.readFileSync(path.join(PKG, f), 'utf8');
    for (const [, spec] of text.matchAll(local)) {
      const base = path.posix.normalize(path.posix.join(path.posix.dirname(f), spec));
      const candidates = base === '.' ? [manifest.main]
        : [base, `${base}.js`, `${base}/index.js`].map((c) => path.posix.normalize(c));
      assert.ok(candidates.some((c) => files.has(c)), `${f} loads '${spec}', which is not packed`);
    }
  }
});

test('the ES module entry gives the CommonJS objects as named exports', async () => {
  const cjs = require('..');
  const esm = await import(path.join(PKG, 'index.mjs'));
  assert.strictEqual(esm.default, cjs);
  const publicNames = Object.keys(cjs).filter((k) => !k.startsWith('_'));
  assert.ok(publicNames.includes('Client') && publicNames.includes('Election'));
  for (const name of publicNames) {
    assert.strictEqual(esm[name], cjs[name], `index.mjs does not export ${name} as index.js has it`);
  }
  const named = Object.keys(esm).filter((k) => k !== 'default').sort();
  assert.deepStrictEqual(named, [...publicNames].sort());
});
