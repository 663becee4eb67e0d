# Atrium: one static binary on scratch, running as a non-root user (uid 65532).
#   docker build -t atrium .
#   docker run -d -p 8080:8080 -v atrium-data:/data --name atrium atrium
# See docs/docker.md. Works with BuildKit and with the legacy builder (no RUN --mount).
#
# GO_IMAGE can point at a mirror or a pinned digest. It needs Go >= go.mod's go line
# (1.27.3, the approved toolchain: govulncheck finds 11 reachable standard-library
# advisories in 1.26.8), a POSIX shell (busybox is enough) and
# /etc/ssl/certs/ca-certificates.crt (no apt-get).
ARG GO_IMAGE=golang:1.27.3-bookworm

FROM ${GO_IMAGE} AS modules
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

# The list of dependency packages the binary imports. This stage reruns on every source
# change (it needs the source) but only runs `go list`, offline and in seconds; its output
# changes only when an import does, so the COPY --from below stays cached.
FROM modules AS deplist
COPY . .
RUN go list -deps -f '{{if and .Module (not .Module.Main)}}{{.ImportPath}}{{end}}' . > /deps.txt

FROM modules AS build
# Compile every dependency in a layer of its own (most of a cold build, modernc.org/sqlite
# above all), with the same flags as the final build so that its
# build cache is reused: a source-only change then compiles Atrium's own packages alone.
# There is no BuildKit cache mount here because the legacy builder has none.
COPY --from=deplist /deps.txt /deps.txt
RUN go build -trimpath $(cat /deps.txt)
COPY . .
# VERSION and REVISION name the build in `atrium version` and in the image labels
# (.git is not in the build context, so -buildvcs cannot find them): e.g.
#   --build-arg VERSION=v1.2.0 --build-arg REVISION="$(git rev-parse HEAD)"
# Declared after the dependency layer, so that changing them does not rebuild it.
# Few steps from here on, each one a copy of this heavy tree with the vfs storage driver.
ARG VERSION= REVISION=
# The generated *_templ.go files are committed, so no templ step is needed here.
# -buildvcs=false: .git is not in the build context.
# scratch has no shell, so the run-time tree is prepared here and copied in two steps:
#   /out/rootfs (owned by root): the binary, the CA bundle for HTTPS to model providers,
#     passwd/group entries so that the uid has a name, and a world-writable sticky /tmp
#     (SQLite's temporary files, os.TempDir);
#   /out/datafs: the data directory, 0700 and owned by the run-time uid.
# Directories are copied as the contents of a parent, because COPY does not keep the
# mode of the directory named as its source (the legacy builder makes it 0755).
RUN go build -trimpath -buildvcs=false \
      -ldflags="-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" -o /out/atrium . \
 && /out/atrium -h >/dev/null \
 && mkdir -p /out/rootfs/etc/ssl/certs /out/rootfs/tmp /out/datafs/data \
 && mv /out/atrium /out/rootfs/atrium \
 && chmod 1777 /out/rootfs/tmp \
 && chmod 0700 /out/datafs/data \
 && test -s /etc/ssl/certs/ca-certificates.crt \
 && cp /etc/ssl/certs/ca-certificates.crt /out/rootfs/etc/ssl/certs/ca-certificates.crt \
 && echo 'atrium:x:65532:65532:atrium:/data:/sbin/nologin' > /out/rootfs/etc/passwd \
 && echo 'atrium:x:65532:' > /out/rootfs/etc/group

FROM scratch
ARG VERSION= REVISION=
LABEL org.opencontainers.image.title="Atrium" \
      org.opencontainers.image.description="Self-hosted AI agent: one static Go binary with a SQLite data directory" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/rootfs/ /
COPY --from=build --chown=65532:65532 /out/datafs/ /
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
