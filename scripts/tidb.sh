# Sourced by scripts/test.sh: builds tidb-server for the TiDB suite from the
# module in internal/mysqltest/tidb (a module of its own, outside go.work:
# TiDB's dependencies do not coexist with the project's), once per version:
# the binary is cached under the module's go.sum hash. About 14 minutes the
# first time (4 of them compiling; 2.5 GB of memory on 2 cores), and 3 GB of
# module cache.
ensure_tidb() {
  local mod
  mod="$(cd "$(dirname "${BASH_SOURCE[0]}")/../internal/mysqltest/tidb" && pwd)"
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/election"
  local bin
  bin="$cache/tidb-server-$(sha256sum "$mod/go.sum" | cut -c1-16)"
  if [ ! -x "$bin" ]; then
    echo "building tidb-server for the TiDB tests (once; about 14 minutes with its downloads)..." >&2
    mkdir -p "$cache"
    if ! (cd "$mod" && GOWORK=off go build -o "$bin.tmp" github.com/pingcap/tidb/cmd/tidb-server) >&2; then
      rm -f "$bin.tmp"
      echo "NOTE: the TiDB tests will not run: building tidb-server failed (output above)" >&2
      return 1
    fi
    mv "$bin.tmp" "$bin"
  fi
  export ELECTION_TIDB_SERVER="$bin"
}
