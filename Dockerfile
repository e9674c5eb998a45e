# lifeboat's container image for Docker users: the same files as `make image`
# (which needs no Docker engine: scripts/build-image.sh), built by Docker.
#   docker build --build-arg VERSION=v1.2.3 -t REGISTRY/lifeboat:v1.2.3 .
# One static binary (CGO off, the flags of make build) on scratch with the
# root filesystem of scripts/image-rootfs.sh: CA certificates and tzdata
# from Debian's packages, /etc/passwd with nonroot 65532, no shell. The
# drill's throwaway etcd is the binary itself, run as a child process
# (lifeboat __etcd): the image needs nothing else. deploy's TestDockerfile
# checks it against make image.

FROM golang:1.26 AS build
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates tzdata \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Modules first, so they stay cached until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.Version=${VERSION}" \
      -o /out/lifeboat ./cmd/lifeboat \
 && /out/lifeboat version \
 && ./scripts/image-rootfs.sh /rootfs /out/lifeboat \
 && chown -R 65532:65532 /rootfs/var/lib/lifeboat /rootfs/home/nonroot

FROM scratch
COPY --from=build /rootfs/ /
USER 65532:65532
WORKDIR /var/lib/lifeboat
# /metrics, /healthz, /readyz, /status: agent.listen defaults to
# 127.0.0.1:9469; in a container set LIFEBOAT_AGENT_LISTEN=0.0.0.0:9469.
EXPOSE 9469
ENV PATH=/
ENTRYPOINT ["/lifeboat"]
CMD ["agent", "--config", "/etc/lifeboat/config.yaml"]
