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
