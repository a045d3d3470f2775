# node-ipam-lb: `docker build -t node-ipam-lb:0.1.0 .` (deploy/README.md); the tag is
# app/__init__.py __version__. Two stages: the build stage installs the locked
# dependencies (deploy/image/requirements.lock: every version pinned, every file checked
# against its sha256) into a virtualenv and builds the app's wheel with a locked build
# backend; the final stage copies only that virtualenv onto a fresh slim base, runs as a
# non-root numeric user and has no pip. deploy/image/verify.sh checks the same steps
# without a container engine.
# The base image is a build argument, e.g. a mirror or a digest-pinned reference:
#   --build-arg PYTHON_IMAGE=registry.example.org/python:3.11-slim-bookworm@sha256:...
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# /opt/venv (what ships) gets no pip and no bundled setuptools: it holds the lock's pins
# and the app, nothing else. /opt/build (discarded) has the pip that installs into it.
RUN python -m venv --without-pip /opt/venv && python -m venv /opt/build
WORKDIR /src
# Dependencies in their own layer: rebuilt only when a lock file changes. --no-deps:
# nothing outside the lock is resolved; --require-hashes: nothing unchecked is installed.
COPY deploy/image/requirements.lock deploy/image/build-requirements.lock ./
RUN /opt/build/bin/pip --python /opt/venv/bin/python install --require-hashes --no-deps -r requirements.lock \
 && /opt/build/bin/pip install --require-hashes --no-deps -r build-requirements.lock
# The package itself, built with the locked setuptools (no build isolation, so nothing is
# downloaded), then installed without dependencies (all are in the lock).
COPY pyproject.toml README.md ./
COPY app ./app
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/dist . \
 && /opt/build/bin/pip --python /opt/venv/bin/python install --no-deps /tmp/dist/*.whl

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="node-ipam-lb" \
      org.opencontainers.image.description="LoadBalancer Services on node addresses (io.cilium/node)" \
      org.opencontainers.image.licenses="Apache-2.0"
# The base image's own installer is not needed at run time (python:*-slim has one; a
# Debian-made base without python3-pip has none).
RUN if python -m pip --version >/dev/null 2>&1; then python -m pip uninstall -y pip setuptools wheel; fi
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Matches runAsUser/runAsGroup in deploy/base/deployment.yaml; the root filesystem is
# mounted read-only there, so nothing is written outside the emptyDir volumes.
USER 65532:65532
EXPOSE 9443
# --health-probe-bind-address's default: the kubelet's probes (plain HTTP).
EXPOSE 8081
ENTRYPOINT ["node-ipam-lb", "serve"]
