# Causeway's container image, for those who build with docker:
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg REVISION=$(git rev-parse HEAD) -t ghcr.io/causeway-net/causeway:dev .
# `make image` builds the same image without a container daemon
# (hack/image/README.md): the same Debian release and packages
# (hack/image/packages), the same static binaries at /usr/local/bin: every
# command under cmd/ but the lab's, cmd/causeway-lab.
ARG DEBIAN=bookworm

FROM golang:1.26-${DEBIAN} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ $(go list ./cmd/... | grep -v '/cmd/causeway-lab$')

FROM debian:${DEBIAN}-slim
COPY hack/image/packages /tmp/packages
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(grep -v -e '^#' -e '^$' /tmp/packages) \
 && rm -rf /var/lib/apt/lists/* /tmp/packages
COPY --from=build /out/ /usr/local/bin/
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.source=https://github.com/causeway-net/causeway \
      org.opencontainers.image.revision=$REVISION \
      org.opencontainers.image.version=$VERSION
