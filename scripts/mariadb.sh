# Sourced by the other scripts: makes sure a MySQL/MariaDB server can be had.
# With $ELECTION_TEST_DSN or $ELECTION_DSN set, that server is used as is;
# otherwise MariaDB is installed from the Debian packages if no mariadbd or
# mysqld is found, and the Go code starts a private throwaway server from it.
ensure_mariadb() {
  if [ -n "${ELECTION_TEST_DSN:-}${ELECTION_DSN:-}" ]; then
    return 0
  fi
  export PATH="$PATH:/usr/sbin:/usr/local/sbin"
  if command -v mariadbd >/dev/null 2>&1 || command -v mysqld >/dev/null 2>&1; then
    return 0
  fi
  echo "installing MariaDB from the Debian packages (apt-get install mariadb-server)..." >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq mariadb-server >/dev/null
  command -v mariadbd >/dev/null 2>&1 || { echo "mariadbd still not found after apt-get" >&2; return 1; }
}

# The tests of the server's own clock (the root package's TestClockSteps*,
# cmd/electbench's TestChaosClock) run a private mariadbd under libfaketime,
# from Debian's faketime package, and step its clock; without it they skip,
# and this says why.
ensure_faketime() {
  for lib in /usr/lib/*/faketime/libfaketimeMT.so.1 /usr/lib/faketime/libfaketimeMT.so.1; do
    [ -f "$lib" ] && return 0
  done
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! sudo -n true 2>/dev/null; then
      echo "NOTE: the tests of the server's clock will skip: installing faketime needs root" >&2
      return 0
    fi
    sudo="sudo -n"
  fi
  echo "installing faketime from the Debian packages for the tests of the server's clock..." >&2
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq faketime >/dev/null; }; then
    echo "NOTE: the tests of the server's clock will skip: apt-get could not install faketime" >&2
  fi
}

# The Galera suite (internal/galeratest) starts a 3-node MariaDB Galera
# cluster and HAProxy from the Debian packages. Its Go harness installs what
# is missing too, but installing here keeps apt-get out of the timed tests,
# and go test shows a package's skip only with -v: when the packages cannot
# be installed, this says so, and the suite skips with that reason.
ensure_galera() {
  export PATH="$PATH:/usr/sbin:/usr/local/sbin"
  local missing=""
  command -v mariadbd >/dev/null 2>&1 || missing="$missing mariadb-server"
  [ -f /usr/lib/galera/libgalera_smm.so ] || missing="$missing galera-4"
  command -v rsync >/dev/null 2>&1 || missing="$missing rsync"
  [ -x /usr/sbin/haproxy ] || missing="$missing haproxy"
  [ -n "$missing" ] || return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! sudo -n true 2>/dev/null; then
      echo "NOTE: the Galera tests (internal/galeratest) will skip: installing$missing needs root" >&2
      return 0
    fi
    sudo="sudo -n"
  fi
  echo "installing$missing from the Debian packages for the Galera tests..." >&2
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null; }; then
    echo "NOTE: the Galera tests (internal/galeratest) will skip: apt-get could not install$missing" >&2
  fi
}
