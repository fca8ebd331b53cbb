# The worker image used by docker-compose.yml.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
RUN CGO_ENABLED=0 go build -ldflags "-X main.version=${VERSION}" -o /out/effectively ./cmd/effectively

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/effectively /usr/local/bin/effectively
EXPOSE 9410
ENTRYPOINT ["/usr/local/bin/effectively"]
CMD ["run", "--migrate"]
