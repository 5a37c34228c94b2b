import init, { autoAttach } from '/pkg/oncekey.js'

await init()
autoAttach({ headers: { 'X-Tenant': new URLSearchParams(location.search).get('tenant') } })
