// ES module entry of turnstile-client: the same objects as the CommonJS
// entry (index.js), as named exports, and that module's exports object as
// the default export.
//
//   import { Client, Election, TurnstileError } from 'turnstile-client';
//   import turnstile from 'turnstile-client';   // turnstile.Client, ...
import turnstile from './index.js';

export const {
  Client,
  Hold,
  TurnstileError,
  Status,
  codeName,
  tlsCredentials,
  loadProto,
  protoRoot,
  Observation,
  Election,
  requeueUntil,
  acquireAll,
  canonicalOrder,
  MultiHold,
} = turnstile;

export default turnstile;
