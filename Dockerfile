# Build: a static binary, no C toolchain needed at run time.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/superego ./cmd/superego && mkdir -p /out/data

# Run: distroless static, as a non-root user.
FROM gcr.io/distroless/static-debian12:nonroot
WORKDIR /app
COPY --from=build /out/superego /app/superego
COPY flows /app/flows
COPY constitutions /app/constitutions
# The database and the workspaces go to /data, writable by the non-root user; mount a volume there.
COPY --from=build --chown=65532:65532 /out/data /data
VOLUME /data
ENV SUPEREGO_ADDR=0.0.0.0:8080 SUPEREGO_DB=/data/superego.db SUPEREGO_WORKSPACES=/data/workspaces
EXPOSE 8080
USER nonroot:nonroot
ENTRYPOINT ["/app/superego"]
CMD ["serve"]
