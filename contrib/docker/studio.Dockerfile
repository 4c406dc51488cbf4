# syntax=docker/dockerfile:1
# An example studio image with ccs-reap in it: the studio and its reaper sidecar both run this
# image (contrib/docker/compose.yaml), so they share one tmux build. Build ccs-reap's image first:
#   docker build -f contrib/docker/Dockerfile -t ccs-reap:0.3.0 .
#   docker build -f contrib/docker/studio.Dockerfile -t my-studio contrib/docker
FROM node:20-bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends tmux ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=ccs-reap:0.3.0 /ccs-reap /usr/local/bin/ccs-reap
# A stand-in for your studio: a tmux server and one chat (compose.yaml runs it). Replace it.
COPY --chmod=755 stand-in-studio stand-in-claude /usr/local/bin/
# uid 1000 is the node image's "node" user: the compose file's volumes are made its.
USER 1000:1000
CMD ["stand-in-studio"]
