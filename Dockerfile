# ferryd and ferryctl as static binaries on a distroless base.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/ferry-vm/ferry/internal/version.Version=${VERSION}" -o /out/ferryd ./cmd/ferryd \
 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/ferry-vm/ferry/internal/version.Version=${VERSION}" -o /out/ferryctl ./cmd/ferryctl

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ferryd /out/ferryctl /usr/local/bin/
# Non-root by default; a node's libvirt socket is root-owned, so the
# DaemonSet runs ferryd with the user and group that may open it.
USER 65532:65532
EXPOSE 9474
ENTRYPOINT ["/usr/local/bin/ferryd"]
