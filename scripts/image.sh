#!/usr/bin/env bash
# Build the TurboTTS image (default tag turbotts:cpu) from this checkout, then print the build time
# and the image size. Builds only with `--network host` (the engine runs with no bridge: see
# scripts/docker_base.sh, which also makes the base image this script uses unless BASE_IMAGE is set).
#
# pip inside the build sees what the host's pip sees (`pip config list`):
#   - find-links and extra indexes that are local folders are served read-only on 127.0.0.1 for the
#     length of the build and passed as PIP_FIND_LINKS / PIP_EXTRA_INDEX_URL build args;
#   - the host's CA bundle (pip's `cert`) is passed as the BuildKit secret pip_cert, for a network
#     whose TLS is intercepted by a CA of its own (it stays out of every layer and the history);
#   - where a local folder holds the torch wheel for this Python, torch comes from there (its exact
#     version, e.g. 2.13.0+cpu, is pinned so that pip never takes the multi-GB CUDA build from PyPI).
# Environment: TAG, BASE_IMAGE, VARIANT, TORCH_VERSION, DOCKER (the client), PIP_SERVE_PORT, and any other
# `docker build` flags as arguments (e.g. --no-cache).
set -euo pipefail
cd "$(dirname "$0")/.."

TAG=${TAG:-turbotts:cpu}
VARIANT=${VARIANT:-cpu}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
PYTHON_TAG=${PYTHON_TAG:-cp311}  # the base's Python: bookworm's python3 and python:3.11-slim-bookworm
if [ -z "${BASE_IMAGE:-}" ]; then
  scripts/docker_base.sh
  BASE_IMAGE=turbotts-base:bookworm
fi

# BuildKit: Docker 23+ has it through buildx; Debian's docker.io (20.10) client has it built in
DOCKER=${DOCKER:-docker}
if ! "$DOCKER" buildx version >/dev/null 2>&1; then
  if [ -x /usr/bin/docker ] && /usr/bin/docker version --format '{{.Client.Version}}' 2>/dev/null | grep -q '^20\.'; then
    DOCKER=/usr/bin/docker
  fi
  export DOCKER_BUILDKIT=1
fi

# The host's pip settings: "key=value" lines from `pip config list` (env, user and global alike)
pip_setting() {
  python3 -m pip config list 2>/dev/null | sed -n "s/^[^.]*\.$1='\(.*\)'\$/\1/p" | head -n 1 || true
}

serve_dir=$(mktemp -d /tmp/turbotts-pip-serve.XXXXXX)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$serve_dir" "$serve_dir.log"
}
trap cleanup EXIT

build_args=(--build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "VARIANT=$VARIANT")
# a fixed port where it is free: the URLs are build args, and a new one would rebuild every pip layer (and
# the kernels after them). Below Linux's ephemeral range (32768-60999), so no client connection takes it as
# its source port, and probed with SO_REUSEADDR, as http.server binds it: a closed connection's TIME_WAIT
# on it does not count as taken (a test run's thousands of loopback connections made both likely)
port=$(python3 - "${PIP_SERVE_PORT:-28765}" <<'EOF'
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
EOF
)
# Map a local folder (a path or file:// URL) to a URL under the loopback server, in $url; other
# locations pass as they are. An index ($2 = index) is served with its parent, as a mirror's pages
# link to its files relatively (simple/NAME/index.html -> ../../files/...).
num_served=0
to_url() {
  local location=${1#file://}
  location=${location%/}
  url=""
  if [ -d "$location" ]; then
    if [ "$2" = index ]; then
      ln -s "$(realpath "$location/..")" "$serve_dir/$num_served"
      url="http://127.0.0.1:$port/$num_served/$(basename "$location")/"
    else
      ln -s "$(realpath "$location")" "$serve_dir/$num_served"
      url="http://127.0.0.1:$port/$num_served/"
    fi
    num_served=$((num_served + 1))
  elif [[ $1 != file://* && $1 != /* ]]; then
    url=$1
  fi
}
find_links=()
torch_wheel=""
for location in $(pip_setting find-links); do
  to_url "$location" links
  if [ -n "$url" ]; then find_links+=("$url"); fi
  for wheel in "${location#file://}"/torch-"$TORCH_VERSION"+"$VARIANT"-"$PYTHON_TAG"-*.whl; do
    if [ -f "$wheel" ]; then torch_wheel=$wheel; fi
  done
done
extra_indexes=()
for location in $(pip_setting extra-index-url); do
  to_url "$location" index
  if [ -n "$url" ]; then extra_indexes+=("$url"); fi
done
if [ ${#find_links[@]} -gt 0 ]; then build_args+=(--build-arg "PIP_FIND_LINKS=${find_links[*]}"); fi
if [ ${#extra_indexes[@]} -gt 0 ]; then build_args+=(--build-arg "PIP_EXTRA_INDEX_URL=${extra_indexes[*]}"); fi
index_url=$(pip_setting index-url)
if [ -n "$index_url" ]; then build_args+=(--build-arg "PIP_INDEX_URL=$index_url"); fi
if [ -n "$torch_wheel" ]; then
  # its exact version, from the wheel's name; torch's own dependencies from the usual index
  torch_version=$(basename "$torch_wheel" | cut -d- -f2)
  build_args+=(--build-arg "TORCH_VERSION=$torch_version" --build-arg "TORCH_INDEX_URL=${index_url:-https://pypi.org/simple}")
  echo "image: torch $torch_version from $torch_wheel"
else
  build_args+=(--build-arg "TORCH_VERSION=$TORCH_VERSION")
fi
cert=$(pip_setting cert)
if [ -n "$cert" ] && [ -f "$cert" ]; then build_args+=(--secret "id=pip_cert,src=$cert"); fi

if [ $num_served -gt 0 ]; then
  python3 -m http.server --bind 127.0.0.1 --directory "$serve_dir" "$port" >"$serve_dir.log" 2>&1 &
  server_pid=$!
  until python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/', timeout=1)" 2>/dev/null; do
    kill -0 "$server_pid" || { cat "$serve_dir.log" >&2; exit 1; }
    sleep 0.2
  done
  echo "image: serving the host's local pip folders on http://127.0.0.1:$port/ for the build"
fi

start_s=$SECONDS
"$DOCKER" build --network host --progress=plain "${build_args[@]}" -t "$TAG" "$@" .
build_s=$((SECONDS - start_s))
size_b=$("$DOCKER" image inspect --format '{{.Size}}' "$TAG")
echo "image: $TAG built in ${build_s} s on $BASE_IMAGE; size $size_b bytes ($((size_b / 1000000)) MB)"
