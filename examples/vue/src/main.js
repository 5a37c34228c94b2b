import { createApp, createSSRApp } from 'vue'
import App from './App.vue'
import './style.css'

// A page rendered on the server (renderToString(createSSRApp(App)) into #app) is hydrated.
const root = document.getElementById('app')
;(root.firstElementChild ? createSSRApp : createApp)(App).mount(root)
