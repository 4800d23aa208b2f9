# orisun: a static binary in a distroless image, run as a non-root user.
# Build: docker build -t orisun . (see docs/deployment.md)

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The version orisun version and the status report: docker build
# --build-arg VERSION=$(git describe --tags --always --dirty) …; without it
# the binary says what the go command recorded ((devel): .git is not in
# the build context).
ARG VERSION=
# CGO off: the SQLite driver is pure Go, so the binary is fully static.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w ${VERSION:+-X main.version=${VERSION}}" -o /out/orisun ./cmd/orisun \
	&& mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/orisun /usr/local/bin/orisun
# The data directory belongs to the image's non-root user (65532), so a new
# named volume mounted there is writable.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENV ORISUN_DATA_DIR=/data \
	ORISUN_HTTP_ADDR=:8990
VOLUME ["/data"]
# 4222 NATS clients, 6222 NATS cluster routes, 8990 status (/status, /healthz, /readyz, /metrics).
EXPOSE 4222 6222 8990
# The image has no shell, wget or curl: the binary checks /readyz itself.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 CMD ["/usr/local/bin/orisun", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/orisun"]
CMD ["serve"]
