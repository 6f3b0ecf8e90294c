#!/usr/bin/env bash
# A Docker engine and a Debian base image on a machine that cannot reach Docker Hub.
# Idempotent: each step runs only when its result is missing, and says how long it took.
#   1. apt-get install docker.io debootstrap (Debian's engine and bootstrapper)
#   2. start dockerd in the background with no bridge and no iptables rules, so that
#      containers and builds use only `--network host` and every connection stays on the
#      host's own network stack (log: $DOCKERD_LOG)
#   3. build $BASE_IMAGE from Debian's packages: debootstrap bookworm (minbase, plus the
#      Python and the shared libraries the runtime needs) into $ROOTFS, then `docker import`
# The rootfs stays outside the repository (under $TURBOTTS_CACHE_DIR, default /tmp).
# scripts/image.sh builds the TurboTTS image on top of $BASE_IMAGE.
set -euo pipefail

BASE_IMAGE=${BASE_IMAGE:-turbotts-base:bookworm}
SUITE=bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE_DIR=${TURBOTTS_CACHE_DIR:-/tmp/turbotts-cache}
ROOTFS=${ROOTFS:-$CACHE_DIR/docker/rootfs-$SUITE}
DOCKERD_LOG=${DOCKERD_LOG:-/tmp/turbotts-dockerd.log}
DOCKERD_WAIT_S=${DOCKERD_WAIT_S:-60}
# minbase has dpkg, apt and bash only; python3-venv brings ensurepip (the image's /opt/venv),
# libgomp1 is torch's OpenMP runtime, libsndfile1 backs the soundfile package
PACKAGES=python3,python3-venv,python3-pip,ca-certificates,libgomp1,libsndfile1,tzdata

# Run "$@" and print how long it took, under the step name $1.
timed() {
  local name=$1
  shift
  local start_ns
  start_ns=$(date +%s%N)
  "$@"
  local elapsed_ms=$((($(date +%s%N) - start_ns) / 1000000))
  printf 'docker_base: %-24s %6d.%03d s\n' "$name" $((elapsed_ms / 1000)) $((elapsed_ms % 1000))
}

install_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  [ ${#missing[@]} -eq 0 ] && return 0
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

start_dockerd() {
  docker info >/dev/null 2>&1 && return 0
  # no docker0 bridge and no NAT rules: `--network host` is the only network containers get
  setsid nohup dockerd --bridge=none --iptables=false >"$DOCKERD_LOG" 2>&1 &
  local deadline=$((SECONDS + DOCKERD_WAIT_S))
  until docker info >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "docker_base: dockerd did not answer within ${DOCKERD_WAIT_S} s; its log ($DOCKERD_LOG) ends:" >&2
      tail -n 20 "$DOCKERD_LOG" >&2
      return 1
    fi
    sleep 0.5
  done
}

bootstrap_rootfs() {
  # a marker, so that an interrupted debootstrap is redone rather than imported half-made
  [ -f "$ROOTFS/.turbotts-complete" ] && return 0
  rm -rf "$ROOTFS"
  mkdir -p "$ROOTFS"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$DEBIAN_MIRROR" >"$ROOTFS.log" 2>&1 || {
    echo "docker_base: debootstrap failed; its log ($ROOTFS.log) ends:" >&2
    tail -n 20 "$ROOTFS.log" >&2
    return 1
  }
  # the same sources as Debian's own images, so `apt-get install` in a build gets updates too
  printf 'deb %s %s main\ndeb %s %s-updates main\ndeb http://deb.debian.org/debian-security %s-security main\n' \
    "$DEBIAN_MIRROR" "$SUITE" "$DEBIAN_MIRROR" "$SUITE" "$SUITE" >"$ROOTFS/etc/apt/sources.list"
  rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/tmp/*
  touch "$ROOTFS/.turbotts-complete"
}

import_image() {
  tar --numeric-owner --exclude=./.turbotts-complete -C "$ROOTFS" -c . |
    docker import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' \
      --change 'CMD ["bash"]' \
      - "$BASE_IMAGE" >/dev/null
}

timed "apt-get install" install_packages
timed "dockerd start" start_dockerd
if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  echo "docker_base: $BASE_IMAGE is there"
else
  timed "debootstrap $SUITE" bootstrap_rootfs
  timed "docker import" import_image
fi
size_b=$(docker image inspect --format '{{.Size}}' "$BASE_IMAGE")
echo "docker_base: $BASE_IMAGE, $((size_b / 1000000)) MB (rootfs kept in $ROOTFS)"
