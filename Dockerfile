# Atrium: one static binary on scratch, running as a non-root user (uid 65532).
#   docker build -t atrium .
#   docker run -d -p 8080:8080 -v atrium-data:/data --name atrium atrium
# See docs/docker.md. Works with BuildKit and with the legacy builder (no RUN --mount).
#
# GO_IMAGE can point at a mirror or a pinned digest; the build stage needs only a
# POSIX shell (busybox is enough), Go, and /etc/ssl/certs/ca-certificates.crt (no apt-get).
ARG GO_IMAGE=golang:1.26-bookworm

FROM ${GO_IMAGE} AS build
# Module download settings, passed through from `docker build --build-arg ...` when the
# default proxy is not reachable (e.g. --build-arg GOPROXY="$(go env GOPROXY)").
# The defaults are Go's own defaults. Do not put credentials here: build args are
# recorded in the build stage's history.
ARG GOPROXY=https://proxy.golang.org,direct
ARG GOSUMDB=sum.golang.org
ARG GONOSUMDB=
ARG GOPRIVATE=
ENV CGO_ENABLED=0 \
    GOPROXY=${GOPROXY} GOSUMDB=${GOSUMDB} GONOSUMDB=${GONOSUMDB} GOPRIVATE=${GOPRIVATE}
WORKDIR /src
# Dependencies first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The generated *_templ.go files are committed, so no templ step is needed here.
# -buildvcs=false: .git is not in the build context.
RUN go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/atrium . \
 && /out/atrium -h >/dev/null
# scratch has no shell, so the run-time files are prepared here: the data directory
# (owned by the run-time uid; COPY --chown below keeps it so), a world-writable /tmp
# (SQLite's temporary files, os.TempDir), the CA bundle for HTTPS to model providers,
# and passwd/group entries so that the uid has a name.
RUN mkdir -p /out/data /out/tmp /out/etc/ssl/certs \
 && chmod 0700 /out/data && chown 65532:65532 /out/data \
 && chmod 1777 /out/tmp \
 && test -s /etc/ssl/certs/ca-certificates.crt \
 && cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/ca-certificates.crt \
 && echo 'atrium:x:65532:65532:atrium:/data:/sbin/nologin' > /out/etc/passwd \
 && echo 'atrium:x:65532:' > /out/etc/group

FROM scratch
COPY --from=build /out/etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/etc/passwd /etc/passwd
COPY --from=build /out/etc/group /etc/group
COPY --from=build /out/tmp /tmp
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build /out/atrium /atrium
USER 65532:65532
WORKDIR /data
ENV ATRIUM_DATA=/data ATRIUM_ADDR=:8080
VOLUME /data
EXPOSE 8080
# SIGTERM starts a clean shutdown (in-flight replies saved, database closed) bounded by
# ATRIUM_SHUTDOWN_TIMEOUT (10s), the same as docker stop's default grace period; use
# `docker stop -t 15` or `docker run --stop-timeout 15` if you raise it.
STOPSIGNAL SIGTERM
# `atrium healthcheck` GETs http://127.0.0.1:<port of ATRIUM_ADDR>/healthz.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 CMD ["/atrium", "healthcheck"]
ENTRYPOINT ["/atrium"]
