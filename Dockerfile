# The simulator image: `llmsim serve` as a non-root user on port 8000.
#   docker build -t llmsim:dev .
#   docker run --rm -p 8000:8000 llmsim:dev            # embedded models.yml and responses.yml
#   docker run --rm -p 8000:8000 -v $PWD/models.yml:/etc/llmsim/models.yml:ro llmsim:dev --config /etc/llmsim/models.yml
#   docker run --rm -p 8000:8000 --entrypoint vllm llmsim:dev serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY simulator simulator
COPY operator operator
RUN pip install --no-cache-dir --root-user-action=ignore --prefix=/install .

FROM python:3.11-slim
# The version is llmsim.__version__: `make images` and e2e/kind-up.sh pass it (hack/version.sh).
ARG VERSION=dev
LABEL org.opencontainers.image.title="llmsim" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/llmsim/llmsim" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /install /usr/local
# vLLM's entry points, in the image only (deploy/vllm-shim/README.md): `vllm serve ...` and
# `python -m vllm.entrypoints.openai.api_server ...` run `llmsim serve ...`.
COPY --chmod=755 deploy/vllm-shim/bin/vllm /usr/local/bin/vllm
COPY deploy/vllm-shim/python /opt/llmsim-vllm-shim
# Read-only root filesystems are the norm in the cluster: never write .pyc files at runtime.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/opt/llmsim-vllm-shim \
    LLMSIM_HOST=0.0.0.0 \
    LLMSIM_PORT=8000
# 65532: the conventional "nonroot" uid/gid, which the operator's manifests also set as runAsUser. It gets
# a passwd entry: a uid without one breaks getpass.getuser() (kopf crashed on it) and anything else
# that asks who it runs as.
RUN groupadd --gid 65532 nonroot \
 && useradd --no-log-init -K UID_MAX=65535 --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nonroot
USER 65532:65532
EXPOSE 8000
ENTRYPOINT ["llmsim", "serve"]
