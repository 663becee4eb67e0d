# Atrium: one static binary on scratch, running as a non-root user.
#   docker build -t atrium .
#   docker run -d -p 8080:8080 -v atrium-data:/data atrium
# GO_IMAGE can point at a mirror or a pinned digest; the build stage needs only a
# shell, Go and /etc/ssl/certs/ca-certificates.crt (no apt-get).
ARG GO_IMAGE=golang:1.26-bookworm

FROM ${GO_IMAGE} AS build
WORKDIR /src
ENV CGO_ENABLED=0
# Dependencies first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN go build -trimpath -ldflags="-s -w" -o /out/atrium .
# scratch has no shell, so the run-time files are prepared here: the data directory
# (owned by the run-time uid; COPY --chown below keeps it so), the CA bundle for
# HTTPS to model providers, and passwd/group entries so that the uid has a name.
RUN mkdir -p /out/data /out/etc/ssl/certs \
 && chown 65532:65532 /out/data \
 && test -s /etc/ssl/certs/ca-certificates.crt \
 && cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/ca-certificates.crt \
 && echo 'atrium:x:65532:65532:atrium:/data:/sbin/nologin' > /out/etc/passwd \
 && echo 'atrium:x:65532:' > /out/etc/group

FROM scratch
COPY --from=build /out/etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/etc/passwd /etc/passwd
COPY --from=build /out/etc/group /etc/group
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build /out/atrium /atrium
USER 65532:65532
ENV ATRIUM_DATA=/data ATRIUM_ADDR=:8080
VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s CMD ["/atrium", "healthcheck"]
ENTRYPOINT ["/atrium"]
