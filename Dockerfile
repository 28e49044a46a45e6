# The image `scripts/image` builds without a daemon, for those who build with Docker/BuildKit:
#   docker build --build-arg REVISION=$(git rev-parse HEAD) -t kubectl-vap .
# Its final stage must stay equivalent to scripts/image's config (a static binary and LICENSE
# at /, no shell, the user, port, entrypoint, cmd and labels): tests/image_config.rs compares them.
# See docs/image.md.

FROM rust:1.89-bookworm AS build
WORKDIR /kubectl-vap
COPY . .
# crt-static links glibc statically (libc6-dev's libc.a): the final image has no libraries.
# --target keeps build scripts and proc-macros dynamic, as they must be.
RUN target="$(uname -m)-unknown-linux-gnu" \
 && RUSTFLAGS="-C target-feature=+crt-static --remap-path-prefix=/usr/local/cargo=/cargo" \
    cargo build --release --locked --target "$target" \
 && cp "target/$target/release/kubectl-vap" /kubectl-vap

FROM scratch
ARG REVISION=unknown
COPY --from=build /kubectl-vap /kubectl-vap
COPY LICENSE /LICENSE
USER 65532:65532
EXPOSE 8080
LABEL org.opencontainers.image.title="kubectl-vap" \
      org.opencontainers.image.description="Gatekeeper ConstraintTemplates as ValidatingAdmissionPolicies: the in-cluster reconciler" \
      org.opencontainers.image.source="https://github.com/kubectl-vap/kubectl-vap" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="${REVISION}"
ENTRYPOINT ["/kubectl-vap", "run", "--in-cluster"]
CMD ["--metrics-addr=0.0.0.0:8080"]
