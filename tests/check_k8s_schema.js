// Validates Kubernetes objects against the Kubernetes API schema, offline,
// with the npm package kubernetes-models (its generated JSON-schema
// validators), and finds fields the schema does not know.
//
// Usage: node tests/check_k8s_schema.js NODE_MODULES_DIR OBJECTS.json
//   OBJECTS.json: [{"file": ..., "index": ..., "object": {...}}, ...]
// Prints one JSON array: per object {file, index, kind, name, model,
// schemaErrors: [..], unknownFields: [..]}. Exits 0 when it could run the
// validation (the caller judges the results), 2 on a usage/setup error.
//
// Unknown fields: the Kubernetes OpenAPI schemas do not forbid extra
// properties, so a misspelt field (`imagePullPolicyy`) would pass the schema
// and be silently dropped by the API server. The validator is therefore run
// a second time on a Proxy of the object that records every property the
// validator reads: a property of a schema-described object is read by its
// validator; a property that no validator read is unknown to the schema.
// Objects the validator enumerates (maps such as labels, annotations,
// ConfigMap data, resource limits) are maps: all their keys are accepted.
'use strict';
const fs = require('fs');
const path = require('path');

function usage(msg) {
  process.stderr.write(`check_k8s_schema: ${msg}\n`);
  process.exit(2);
}

if (process.argv.length !== 4) usage('usage: node check_k8s_schema.js NODE_MODULES_DIR OBJECTS.json');
const modulesDir = path.resolve(process.argv[2]);
const objects = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));

// apiVersion "apps/v1" -> kubernetes-models/apps/v1/<Kind>; "v1" -> kubernetes-models/v1/<Kind>.
function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== 'string' || typeof kind !== 'string' ||
      !/^([a-z0-9.-]+\/)?v[0-9a-z]+$/.test(apiVersion) || !/^[A-Z][A-Za-z0-9]*$/.test(kind)) {
    return { error: `not a Kubernetes apiVersion/kind: ${apiVersion} ${kind}` };
  }
  const modulePath = path.join(modulesDir, 'kubernetes-models', apiVersion, kind + '.js');
  if (!fs.existsSync(modulePath)) {
    return { error: `kubernetes-models has no ${apiVersion} ${kind} (not a built-in API type)` };
  }
  const mod = require(modulePath);
  if (typeof mod[kind] !== 'function') return { error: `kubernetes-models/${apiVersion}/${kind} exports no model` };
  return { model: mod[kind], id: `kubernetes-models/${apiVersion}/${kind}` };
}

// Proxy bookkeeping, keyed by the raw (target) object.
const readKeys = new WeakMap();     // object -> Set of property names read
const enumerated = new WeakSet();   // objects whose keys the validator listed (maps)
const proxies = new WeakMap();

function track(value) {
  if (value === null || typeof value !== 'object') return value;
  let p = proxies.get(value);
  if (p) return p;
  if (!readKeys.has(value)) readKeys.set(value, new Set());
  const reads = readKeys.get(value);
  p = new Proxy(value, {
    get(target, key, receiver) {
      if (typeof key === 'string') reads.add(key);
      return track(Reflect.get(target, key, receiver));
    },
    has(target, key) {
      if (typeof key === 'string') reads.add(key);
      return Reflect.has(target, key);
    },
    getOwnPropertyDescriptor(target, key) {
      if (typeof key === 'string') reads.add(key);
      return Reflect.getOwnPropertyDescriptor(target, key);
    },
    ownKeys(target) {
      enumerated.add(target);
      return Reflect.ownKeys(target);
    },
  });
  proxies.set(value, p);
  return p;
}

function unknownFields(value, where, out) {
  if (value === null || typeof value !== 'object') return;
  if (Array.isArray(value)) {
    value.forEach((v, i) => unknownFields(v, `${where}[${i}]`, out));
    return;
  }
  const reads = readKeys.get(value);
  const isMap = enumerated.has(value);
  for (const key of Object.keys(value)) {
    const child = where === '' ? key : `${where}.${key}`;
    if (!isMap && (!reads || !reads.has(key))) {
      out.push(child);  // its own fields are not looked at
      continue;
    }
    unknownFields(value[key], child, out);
  }
}

const results = [];
for (const entry of objects) {
  const obj = entry.object;
  const res = {
    file: entry.file,
    index: entry.index,
    kind: obj && obj.kind,
    name: obj && obj.metadata && obj.metadata.name,
    model: null,
    schemaErrors: [],
    unknownFields: [],
  };
  results.push(res);
  const found = modelFor(obj && obj.apiVersion, obj && obj.kind);
  if (found.error) {
    res.schemaErrors.push(found.error);
    continue;
  }
  res.model = found.id;
  // 1. The library's own validation of a model built from the plain object.
  try {
    new found.model(JSON.parse(JSON.stringify(obj))).validate();
  } catch (e) {
    res.schemaErrors.push(String(e && e.message ? e.message : e));
  }
  // 2. The same validator over a recording proxy: fields nobody read.
  const copy = JSON.parse(JSON.stringify(obj));
  try {
    found.model.prototype.validate.call(track(copy));
  } catch (e) {
    // Already reported by step 1.
  }
  unknownFields(copy, '', res.unknownFields);
}
process.stdout.write(JSON.stringify(results, null, 1) + '\n');
