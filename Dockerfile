# node-ipam-lb: `docker build -t localhost/node-ipam-lb:0.1.0 .` (deploy/README.md).
# Two stages: the build stage installs into a virtualenv; the final stage copies only that
# virtualenv onto a fresh slim base, runs as a non-root numeric user and has no pip.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
WORKDIR /src
# Dependencies in their own layer: rebuilt only when pyproject.toml changes.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > requirements.txt \
 && pip install -r requirements.txt
# The package itself (no dependencies left to resolve).
COPY README.md ./
COPY app ./app
RUN pip install --no-deps . \
 && pip uninstall -y pip

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="node-ipam-lb" \
      org.opencontainers.image.description="LoadBalancer Services on node addresses (io.cilium/node)" \
      org.opencontainers.image.licenses="Apache-2.0"
# The base image's own installer is not needed at run time.
RUN python -m pip uninstall -y pip setuptools wheel
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Matches runAsUser/runAsGroup in deploy/base/deployment.yaml; the root filesystem is
# mounted read-only there, so nothing is written outside the emptyDir volumes.
USER 65532:65532
EXPOSE 9443
ENTRYPOINT ["node-ipam-lb", "serve"]
