# Sourced by tests/e2e/compose: brings up a Docker-API container engine on a machine
# without a Docker daemon. Podman (as root, with runc) serves the Docker API on a unix
# socket; the docker CLI and docker-compose talk to it through DOCKER_HOST. Where
# DOCKER_HOST already answers (a real Docker engine), nothing is set up.
#
# engine_up DIR    start (or reuse) the engine; its socket and log live in DIR. Setting
#                  up podman needs root (as on CI): it installs Debian packages and
#                  writes /etc/containers/containers.conf.
# engine_down      stop the service engine_up started (never one it found running)
# base_image       make debian:bookworm-slim available (debootstrap + import when no
#                  registry can be reached)

engine_log() { echo "[engine] $*" >&2; }

# With recommends: podman's network stack (netavark, aardvark-dns) resolves compose
# service names between containers.
engine_install() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v runc >/dev/null || missing+=(runc)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v docker-compose >/dev/null || missing+=(docker-compose)
  command -v docker >/dev/null || missing+=(docker.io)
  if ((${#missing[@]})); then
    engine_log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# crun fails on this kind of machine (cgroup v1 without systemd, rlimits): use runc and
# leave the default ulimits alone. Exec sessions (health checks, `compose exec`) leave a
# conmon behind for exit_command_delay seconds: 10, not 5 minutes.
engine_configure() {
  local conf=/etc/containers/containers.conf
  if ! grep -q 'exit_command_delay = 10' "$conf" 2>/dev/null; then
    engine_log "writing $conf (runtime runc, no default ulimits, exec cleanup after 10 s)"
    mkdir -p /etc/containers
    [ -f "$conf" ] && cp "$conf" "$conf.lockstep-backup"
    cat >"$conf" <<'CONF'
# Written by Lockstep's tests/e2e/engine.sh: crun fails here on cgroups and rlimits.
[containers]
default_ulimits = []

[engine]
runtime = "runc"
# Exec sessions' monitors (conmon) linger this long after the command ends (default 300).
exit_command_delay = 10
CONF
  fi
}

ENGINE_PID=""
engine_up() {
  local dir=$1
  mkdir -p "$dir"
  if [ -n "${DOCKER_HOST:-}" ] && docker version >/dev/null 2>&1; then
    engine_log "using the engine at $DOCKER_HOST"
    return 0
  fi
  if [ -S /var/run/docker.sock ] && docker version >/dev/null 2>&1; then
    engine_log "using the Docker engine at /var/run/docker.sock"
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    engine_log "no Docker engine answers, and the podman setup here needs root"
    return 1
  fi
  engine_install || return 1
  engine_configure || return 1
  export DOCKER_HOST="unix://$dir/podman.sock"
  if ! docker version >/dev/null 2>&1; then
    rm -f "$dir/podman.sock"
    # Docker's image format keeps HEALTHCHECK (OCI's drops it).
    BUILDAH_FORMAT=docker podman system service --time=0 "$DOCKER_HOST" \
      >"$dir/podman-service.log" 2>&1 &
    ENGINE_PID=$!
    for _ in $(seq 100); do
      docker version >/dev/null 2>&1 && break
      sleep 0.2
    done
  fi
  docker version --format 'engine: {{.Server.Version}} ({{.Server.Os}})' >&2 || {
    engine_log "the podman service did not answer; see $dir/podman-service.log"
    return 1
  }
}

engine_down() {
  if [ -n "$ENGINE_PID" ]; then
    kill "$ENGINE_PID" 2>/dev/null || true
    wait "$ENGINE_PID" 2>/dev/null || true
    ENGINE_PID=""
  fi
}

# A registry may be out of reach (as on Lockstep's CI machines): then build the base image
# from Debian's packages with debootstrap, which needs only the apt mirror.
base_image() {
  local image=docker.io/library/debian:bookworm-slim dir=$1
  if docker image inspect "$image" >/dev/null 2>&1; then return 0; fi
  if timeout 60 docker pull "$image" >/dev/null 2>&1; then return 0; fi
  engine_log "no registry: building $image with debootstrap"
  local root="$dir/bookworm-rootfs"
  rm -rf "$root"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$dir/debootstrap.log" 2>&1 || {
    tail -20 "$dir/debootstrap.log" >&2
    return 1
  }
  rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
  tar -C "$root" -c . | docker import - "$image" >/dev/null
  rm -rf "$root"
}
