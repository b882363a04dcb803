import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// The gateway serves dist/ at `/` (gateway/src/console.ts): hashed file names under assets/,
// cached for a year; index.html carries the placeholder that each response replaces with its CSP
// nonce (Vite writes it on the tags it adds and in <meta property="csp-nonce">, where the UI
// library's <style> tags take it from).
export default defineConfig({
  plugins: [react()],
  base: "/",
  html: { cspNonce: "__PIES_CSP_NONCE__" },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsDir: "assets",
    // No inline data: URLs for assets (the CSP allows images from data: only for the favicon).
    assetsInlineLimit: 0,
    // Source maps stay out of the image; the code is ours and readable in the repository.
    sourcemap: false,
    chunkSizeWarningLimit: 600,
  },
  server: {
    // `npm run dev -w console` against a gateway on :8080.
    proxy: { "/api": "http://127.0.0.1:8080" },
  },
});
