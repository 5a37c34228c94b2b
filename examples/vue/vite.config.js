import vue from '@vitejs/plugin-vue'
import { defineConfig } from 'vite'

// `make test` serves dist/ from the reference server under /vue/ (relative asset paths). For
// `npm run dev`, the API is proxied to a reference server started on :8080.
export default defineConfig({
  plugins: [vue()],
  base: './',
  build: { outDir: 'dist', emptyOutDir: true, target: 'es2022' },
  // The package finds its .wasm beside itself (new URL(..., import.meta.url)), which the dev
  // server's dependency pre-bundling would move away from it.
  optimizeDeps: { exclude: ['oncekey'] },
  // The dev server may read the demo's stylesheet in ../../www.
  server: { proxy: { '/api': 'http://127.0.0.1:8080' }, fs: { allow: ['../..'] } },
})
