import { StrictMode } from 'react'
import { createRoot, hydrateRoot } from 'react-dom/client'
import { App } from './App.jsx'
// The demo's look (www/), and this app's own few rules.
import '../../../www/src/style.css'
import './app.css'

// Strict mode runs every effect twice in development: the hook still sends each ticket once.
const app = (
  <StrictMode>
    <App />
  </StrictMode>
)
// A page rendered on the server (renderToString(<App />) into #root) is hydrated.
const root = document.getElementById('root')
if (root.firstElementChild) hydrateRoot(root, app)
else createRoot(root).render(app)
