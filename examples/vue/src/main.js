import { createApp, createSSRApp } from 'vue'
import App from './App.vue'
// The demo's look (www/), and this app's own few rules.
import '../../../www/src/style.css'
import './app.css'

// A page rendered on the server (renderToString(createSSRApp(App)) into #app) is hydrated.
const root = document.getElementById('app')
;(root.firstElementChild ? createSSRApp : createApp)(App).mount(root)
