import path from 'node:path'
import { fileURLToPath } from 'node:url'
import react from '@vitejs/plugin-react'
import { defineConfig } from 'vite'

// examples/react's sources, with React 18 (this folder's node_modules) for the app and for
// oncekey/react alike: a development build, where strict mode runs every effect twice, and a
// server build.
const here = path.dirname(fileURLToPath(import.meta.url))
const modules = path.join(here, 'node_modules')
export default defineConfig(({ isSsrBuild }) => ({
  plugins: [react()],
  root: path.join(here, '../../../examples/react'),
  base: './',
  // The server build leaves its imports bare, for Node to resolve from dist-ssr/ (this folder's).
  resolve: isSsrBuild
    ? {}
    : {
        alias: {
          oncekey: path.join(modules, 'oncekey'),
          'react-dom': path.join(modules, 'react-dom'),
          react: path.join(modules, 'react'),
        },
      },
  build: { outDir: path.join(here, isSsrBuild ? 'dist-ssr' : 'dist'), emptyOutDir: true, target: 'es2022' },
}))
