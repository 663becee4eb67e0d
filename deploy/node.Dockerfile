# Atrium with Node.js, for MCP servers that run over stdio with `npx` (the default image
# is FROM scratch: no shell, no Node). Build the default image first, then this one:
#   docker build -t atrium .
#   docker build -f deploy/node.Dockerfile -t atrium:node .
#   docker run -d --init -p 8080:8080 -v atrium-data:/data --name atrium atrium:node
# See docs/docker.md ("Node for stdio MCP servers").
#
# A separate file, not a stage of ./Dockerfile: the last stage is the one `docker build .`
# makes, and the legacy builder builds every stage before it, so a Node stage there
# would pull a Node image for everyone.
#
# ATRIUM_IMAGE: the image built from ./Dockerfile. NODE_IMAGE: any Node image with a
# POSIX shell, mkdir, chown and grep, e.g. a pinned digest or a local mirror.
ARG ATRIUM_IMAGE=atrium
ARG NODE_IMAGE=node:22-bookworm-slim

FROM ${ATRIUM_IMAGE} AS atrium

FROM ${NODE_IMAGE}
COPY --from=atrium /atrium /atrium
# The CA bundle Atrium uses for HTTPS to model providers (slim Node images have none).
COPY --from=atrium /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# npm keeps its cache in $HOME/.npm and npx its packages there: HOME must be a directory
# uid 65532 can write (with HOME=/ npm fails with "EACCES: permission denied, mkdir '/.npm'").
RUN mkdir -p /home/atrium /data \
 && chown 65532:65532 /home/atrium /data \
 && chmod 0700 /home/atrium /data \
 && { grep -q '^atrium:' /etc/passwd || echo 'atrium:x:65532:65532:atrium:/home/atrium:/usr/sbin/nologin' >> /etc/passwd; } \
 && { grep -q '^atrium:' /etc/group || echo 'atrium:x:65532:' >> /etc/group; } \
 && node --version && npm --version && npx --version
USER 65532:65532
WORKDIR /data
ENV HOME=/home/atrium ATRIUM_DATA=/data ATRIUM_ADDR=:8080
VOLUME /data
EXPOSE 8080
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 CMD ["/atrium", "healthcheck"]
ENTRYPOINT ["/atrium"]
