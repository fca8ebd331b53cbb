# The release image of the reference build (cmd/effectively), which
# docker-compose.yml and the Helm chart (deploy/helm) run. It runs the worker
# (`run`); the schema is migrated by a separate step, `effectively migrate`,
# run as the schema's owner before the workers start: the compose file's
# migrate service, the chart's migrate Job (docs/operations/kubernetes.md).
#
#   docker build --build-arg VERSION=v1.2.3 -t effectively:v1.2.3 .
#
# The base images are pinned by digest, the tag kept beside it: a rebuild of
# a commit gets the same bases, and a tag pushed again cannot change a
# release underneath it. The digests could not be checked against the
# registries where this file was written (no registry was reachable there):
# each is the digest that several unrelated public projects pin for the tag
# named beside it (golang:1.26.8-bookworm; distroless static-debian12:nonroot
# as pinned from 2026-08). Check both before a release, and whenever a tag
# is bumped:
#
#   docker buildx imagetools inspect golang:1.26.8-bookworm
#   docker buildx imagetools inspect gcr.io/distroless/static-debian12:nonroot
#
# (or `crane digest IMAGE`), and pin the Digest: line of the index it prints.
# deploy/image_test.go checks the pins, the build flags and the user.

# golang:1.26.8-bookworm (go.mod's go 1.26.8; Debian 12, as the runtime base)
FROM golang:1.26.8-bookworm@sha256:a688600ca24f8a4d3ca77f95b0dd40704a9fc787c826660eb7ba0b641b8b175d AS build
WORKDIR /src
COPY . .
ARG VERSION=devel
# -trimpath: no path of the build machine in the binary, so the same source
# builds the same binary anywhere; CGO_ENABLED=0: a static binary for the
# static base. The caches only speed up rebuilds, and only the modules the
# binary imports are fetched (not the test suites').
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=${VERSION}" -o /out/effectively ./cmd/effectively

# gcr.io/distroless/static-debian12:nonroot (no shell, no package manager;
# CA certificates for TLS to Kafka, PostgreSQL and targets)
FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab
COPY --from=build /out/effectively /usr/local/bin/effectively
# nonroot, by number so that Kubernetes' runAsNonRoot can check it.
USER 65532:65532
# The admin server (http.addr: health, readiness, metrics). Its default
# listens on 127.0.0.1 only; a deployment sets EFFECTIVELY_HTTP_ADDR.
EXPOSE 9410
ENTRYPOINT ["/usr/local/bin/effectively"]
CMD ["run"]
