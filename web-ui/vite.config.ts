import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// The built app is served by `stead serve` at `/`; in development `npm run dev` proxies the API
// to a local server.
export default defineConfig({
  plugins: [react()],
  base: "/",
  build: { outDir: "dist", sourcemap: true },
  server: {
    proxy: {
      "/v1": { target: "http://127.0.0.1:8787", ws: true },
    },
  },
  test: {
    include: ["src/**/*.test.ts"],
    globals: true,
  },
});
