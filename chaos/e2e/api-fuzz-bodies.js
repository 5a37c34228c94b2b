// What the API fuzz run's page (api-fuzz.mjs) and its workers (api-fuzz-worker.js) both make of
// a body: an upload of its fields, and the subject of what a Submitter holds pending.

/** `fields` as an upload: a form with them and a file. */
export const upload = (fields) => {
  const form = new FormData()
  for (const [k, v] of Object.entries(fields)) form.append(k, v)
  form.append('attachment', new Blob(['an attachment of ' + fields.subject]), 'note.txt')
  return form
}

/** The subject of `pending` (a Submitter's `pending()`), if any. An upload's body is its fields
 * and its files' descriptions. */
export const subjectOf = (pending) => {
  if (!pending || !pending.body || typeof pending.body !== 'object') return undefined
  return pending.body.fields ? pending.body.fields.subject : pending.body.subject
}
