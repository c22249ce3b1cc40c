// Type declarations of the ES module entry (index.mjs): the same API as
// index.d.ts, as named exports, and the whole module as the default export.
export * from './index.js';
import * as turnstile from './index.js';
export default turnstile;
