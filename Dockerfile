# One image holds the four processes (and the edge); the Helm chart picks one with the container
# command (`node services/catalog/dist/main.js`, …). Build: docker build -t pies .
#
# Stage 1 compiles with the whole tool chain; `scripts/image-tree.mjs assemble` then lays out what
# runs (each runtime workspace's package.json and dist/, production dependencies from the lockfile,
# no install scripts): the same code that `npm run check:image` runs in CI to start pies from such
# a tree. Stage 2 is distroless: node and nothing else (no shell, no package manager), as the
# numeric non-root user 65532, compatible with a read-only root filesystem (only /tmp is written,
# an emptyDir in the chart).

FROM node:26-trixie-slim AS build
WORKDIR /src
# Manifests first, so that a code change reuses the dependency layer.
COPY package.json package-lock.json ./
COPY proto/package.json proto/
COPY common/package.json common/
COPY services/catalog/package.json services/catalog/
COPY services/runs/package.json services/runs/
COPY services/executor/package.json services/executor/
COPY gateway/package.json gateway/
COPY console/package.json console/
COPY embedded/package.json embedded/
COPY testkit/package.json testkit/
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build && node scripts/image-tree.mjs assemble /app

FROM gcr.io/distroless/nodejs26-debian13:nonroot
ENV NODE_ENV=production \
    PATH=/nodejs/bin:/usr/local/bin:/usr/bin:/bin
WORKDIR /app
COPY --from=build --chown=0:0 /app /app
USER 65532:65532
EXPOSE 8080 50051 50052 50053
ENTRYPOINT ["node"]
CMD ["gateway/dist/main.js"]
