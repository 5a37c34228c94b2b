// A module worker: no window, no sessionStorage. The package binds fetch, timers and crypto to
// the global scope, so it works here too (storage degrades to memory with a warning).
import init, { Submitter } from '/pkg/oncekey.js';

self.onmessage = async ({ data }) => {
  try {
    await init();
    const tickets = new Submitter('worker', { url: data.url, headers: { 'X-Tenant': data.tenant } });
    const warnings = [];
    tickets.onChange((e) => { if (e.warning) warnings.push(e.warning); });
    const result = await tickets.submit({ subject: 'From a worker', body: 'no window', email: 'ana@example.com' });
    self.postMessage({ result, warnings });
  } catch (e) {
    self.postMessage({ error: String(e) });
  }
};
