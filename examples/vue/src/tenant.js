// Each visitor (and each end-to-end test) can have its own tickets: ?tenant=NAME (read in the
// browser only: a server render has no location).
export const tenant =
  (typeof location === 'undefined' ? null : new URLSearchParams(location.search).get('tenant')) || 'demo'
