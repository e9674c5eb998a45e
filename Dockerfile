# lifeboat's container image: one static binary (CGO off) on distroless,
# running as the non-root user 65532. No Docker engine is needed to read
# this; build it with
#   make image                      (docker build -t lifeboat:$(VERSION) .)
#   docker build --build-arg VERSION=v1.2.3 -t REGISTRY/lifeboat:v1.2.3 .
# The drill's throwaway etcd is the binary itself, run as a child process
# (lifeboat __etcd): the image needs nothing else.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so they stay cached until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.Version=${VERSION}" \
      -o /out/lifeboat ./cmd/lifeboat \
 && /out/lifeboat version
# The default spool and scratch directories, owned by the runtime user
# (distroless has no shell to create them). Kubernetes mounts emptyDirs
# over them; with docker run, mount a volume at /var/lib/lifeboat.
RUN mkdir -p /out/var/lib/lifeboat/spool /out/var/lib/lifeboat/scratch \
 && chmod -R 0700 /out/var/lib/lifeboat

# static-debian12: CA certificates (for S3 and etcd over TLS), tzdata (for
# retention.time_zone and CRON_TZ), /etc/passwd with nonroot; no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lifeboat /lifeboat
COPY --from=build --chown=65532:65532 /out/var/lib/lifeboat /var/lib/lifeboat
USER 65532:65532
WORKDIR /var/lib/lifeboat
# /metrics, /healthz, /readyz, /status: agent.listen defaults to
# 127.0.0.1:9469; in a container set LIFEBOAT_AGENT_LISTEN=0.0.0.0:9469.
EXPOSE 9469
ENTRYPOINT ["/lifeboat"]
CMD ["agent", "--config", "/etc/lifeboat/config.yaml"]
