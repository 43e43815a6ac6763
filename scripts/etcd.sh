# Sourced by scripts/test.sh: builds what electbench's etcd contenders run,
# from the module in cmd/electbench/etcd (a module of its own, outside
# go.work): the etcd server, cached under the module's go.sum hash (about a
# minute to build the first time), and electbench-etcd, cached under the
# hash of its sources, so that a change to them builds it anew and a
# running electbench keeps the binary it started with. Exports their paths
# in ELECTBENCH_ETCD and ELECTBENCH_ETCD_CANDIDATE, where electbench looks.
ensure_etcd() {
  local root mod
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  mod="$root/cmd/electbench/etcd"
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/election"
  local server candidate
  server="$cache/etcd-$(sha256sum "$mod/go.sum" | cut -c1-16)"
  candidate="$cache/electbench-etcd-$(cat "$mod"/go.mod "$mod"/go.sum "$mod"/*.go "$root"/internal/benchevent/*.go | sha256sum | cut -c1-16)"
  mkdir -p "$cache"
  if [ ! -x "$server" ]; then
    echo "building the etcd server for electbench (once; about a minute)..." >&2
    if ! (cd "$mod" && GOWORK=off go build -o "$server.tmp" go.etcd.io/etcd/server/v3) >&2; then
      rm -f "$server.tmp"
      echo "building the etcd server failed (output above)" >&2
      return 1
    fi
    mv "$server.tmp" "$server"
  fi
  if [ ! -x "$candidate" ]; then
    if ! (cd "$mod" && GOWORK=off go build -o "$candidate.tmp" .) >&2; then
      rm -f "$candidate.tmp"
      echo "building electbench-etcd failed (output above)" >&2
      return 1
    fi
    mv "$candidate.tmp" "$candidate"
  fi
  export ELECTBENCH_ETCD="$server" ELECTBENCH_ETCD_CANDIDATE="$candidate"
}
