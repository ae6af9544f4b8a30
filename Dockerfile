# Build: the same command CI runs.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin line-survey

# Run: no shell, no package manager, a non-root user. distroless/cc has what TLS
# needs: the CA roots (rustls reads them for gRPC to Firestore and for LINE) and
# libssl (Google's token requests go through the system's OpenSSL).
FROM gcr.io/distroless/cc-debian12:nonroot
WORKDIR /app
COPY --from=build /src/target/release/line-survey /app/line-survey
COPY scenarios /app/scenarios
ENV PORT=8080 SCENARIOS_DIR=/app/scenarios LOG_FORMAT=json
USER nonroot
EXPOSE 8080
ENTRYPOINT ["/app/line-survey"]
