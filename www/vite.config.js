import { defineConfig } from 'vite'

// `make demo` serves dist/ from the reference server. For `npm run dev`, the API is proxied to a
// reference server started on :8080.
export default defineConfig({
  build: { outDir: 'dist', emptyOutDir: true, target: 'es2022' },
  server: { proxy: { '/api': 'http://127.0.0.1:8080' } },
})
