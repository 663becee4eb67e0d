# Atrium with Node.js and uv, for MCP servers started with `uvx` (Python) as well as `npx`.
# Built on top of the Node image (deploy/node.Dockerfile):
#   docker build -t atrium .
#   docker build -f deploy/node.Dockerfile -t atrium:node .
#   docker build -f deploy/uv.Dockerfile -t atrium:uv .
# A separate file so that the Node image still builds where ghcr.io or Debian's mirrors
# cannot be reached. See docs/docker.md ("Python servers with uvx").
#
# UV_IMAGE: astral's image that ships the static `uv` and `uvx` binaries (pinned; a local
# mirror or digest works too). python3 comes from Debian: uvx then runs servers on it
# instead of downloading a Python build at each start.
ARG BASE_IMAGE=atrium:node
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.13.8

FROM ${UV_IMAGE} AS uv

FROM ${BASE_IMAGE}
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=uv /uv /uvx /usr/local/bin/
# uv keeps its cache and the tools uvx installs under $HOME, which uid 65532 owns.
ENV UV_PYTHON_PREFERENCE=only-system UV_CACHE_DIR=/home/atrium/.cache/uv
RUN uv --version && uvx --version && python3 --version
USER 65532:65532
