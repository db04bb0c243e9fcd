#!/usr/bin/env bash
# Build (or reuse) llama.cpp's C++ `llama-server` from the source vendored in the
# llama-cpp-python sdist on PyPI. Project tooling for the real-engine tests and benchmarks;
# not a runtime dependency of ridgeline.
#
#   tools/llama_server/build.sh            # prints the binary's path on stdout (last line)
#   RIDGELINE_LLAMA_CPP_PYTHON_VERSION=0.3.36 RIDGELINE_CACHE=/somewhere tools/llama_server/build.sh
#
# The build lives outside the checkout, keyed by version:
#   ${RIDGELINE_CACHE:-$HOME/.cache/ridgeline}/llama.cpp/<version>/build/bin/llama-server
# An existing binary is reused (idempotent). Progress goes to stderr and build.log.
#
# GGML_NATIVE=ON (-march=native): the binary is tuned for the CPU that builds it. CI runs on
# the machine that builds it, so this is fine; copy the cache to another CPU model and it may
# die with SIGILL -- delete the cache folder and rebuild there.
set -euo pipefail

version="${RIDGELINE_LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache="${RIDGELINE_CACHE:-$HOME/.cache/ridgeline}"
root="$cache/llama.cpp/$version"
src="$root/llama_cpp_python-$version/vendor/llama.cpp"
bin="$root/build/bin/llama-server"
jobs="${RIDGELINE_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"

log() { echo "llama-server build: $*" >&2; }

if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  log "reusing $bin"
  echo "$bin"
  exit 0
fi

mkdir -p "$root"
# One build at a time per cache folder (CI and a developer may race).
exec 9>"$root/.lock"
if command -v flock >/dev/null 2>&1; then
  log "waiting for the build lock $root/.lock"
  flock 9
  if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
    log "reusing $bin (built while waiting)"
    echo "$bin"
    exit 0
  fi
fi

python="${PYTHON:-python3}"
if [ ! -f "$src/CMakeLists.txt" ]; then
  log "downloading the llama-cpp-python $version sdist"
  dl="$root/sdist"
  mkdir -p "$dl"
  "$python" -m pip download -q --no-deps --no-binary :all: -d "$dl" \
    "llama-cpp-python==$version" >&2
  tar -xzf "$(ls "$dl"/llama_cpp_python-"$version".tar.gz "$dl"/llama-cpp-python-"$version".tar.gz \
    2>/dev/null | head -n 1)" -C "$root"
  if [ ! -f "$src/CMakeLists.txt" ] && [ -d "$root/llama-cpp-python-$version" ]; then
    mv "$root/llama-cpp-python-$version" "$root/llama_cpp_python-$version"
  fi
fi

# cmake and ninja: the system's, else PyPI's wheels in a small tool venv beside the cache.
if ! command -v cmake >/dev/null 2>&1 || ! command -v ninja >/dev/null 2>&1; then
  tools="$cache/build-tools"
  if [ ! -x "$tools/bin/cmake" ] || [ ! -x "$tools/bin/ninja" ]; then
    log "installing cmake and ninja from PyPI into $tools"
    "$python" -m venv "$tools"
    "$tools/bin/pip" install -q cmake ninja >&2
  fi
  export PATH="$tools/bin:$PATH"
fi

log "configuring and building target llama-server with $jobs jobs (log: $root/build.log)"
{
  cmake -S "$src" -B "$root/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF
  cmake --build "$root/build" --target llama-server -j "$jobs"
} >"$root/build.log" 2>&1 || {
  log "build failed; the end of $root/build.log:"
  tail -n 30 "$root/build.log" >&2
  exit 1
}
"$bin" --version >&2
echo "$bin"
