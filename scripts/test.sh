#!/usr/bin/env bash
# Runs the whole test suite against a real server: the one in
# $ELECTION_TEST_DSN, or a private MariaDB this script installs if needed;
# and the Galera suite against a private 3-node cluster behind HAProxy,
# whose packages it installs if needed. Before that, the checks that need no
# server: gofmt, the election module's leanness (scripts/lean.sh), every
# module tidy, and go vet, with the installed Go and with the oldest Go
# supported (go.mod's go line; fetched through the module proxy), and the
# protocol's SPIN model (scripts/spin.sh, which installs spin if needed).
# The suite runs with the etcd server and electbench-etcd built for
# electbench's etcd contenders (scripts/etcd.sh; their module,
# cmd/electbench/etcd, is outside go.work and vetted here on its own), and
# with Debian's prometheus (promtool, for the rules of monitoring/) and
# chromium (which draws the history picture), installed if missing.
# Last, the root package's suite again against a private TiDB, built once
# from the module proxy (scripts/tidb.sh); skipped, saying why, when it
# cannot be built.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/mariadb.sh
. scripts/tidb.sh
. scripts/etcd.sh
. scripts/packages.sh
# Every module of the workspace (go.work). "./..." would stop at the nested
# modules (electionprom, electionotel, electiongocron, cmd/electbench,
# internal/mysqltest/docker), even in workspace mode; the module path pattern
# takes them all.
pkgs=github.com/sqlelect/election/...
oldest=go1.25.0
unformatted=$(gofmt -l $(git ls-files -co --exclude-standard '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi
scripts/lean.sh
# Every module tidy: the workspace's, and electbench-etcd's outside it.
for dir in $(go list -m -f '{{.Dir}}') cmd/electbench/etcd; do
  (cd "$dir" && GOWORK=off go mod tidy -diff) || { echo "go mod tidy would change $dir (diff above)" >&2; exit 1; }
done
go vet "$pkgs"
(cd cmd/electbench/etcd && GOWORK=off go vet ./...)
echo "build and vet with $oldest:"
GOTOOLCHAIN=$oldest go version
GOTOOLCHAIN=$oldest go build "$pkgs"
GOTOOLCHAIN=$oldest go vet "$pkgs"
bash scripts/spin.sh
ensure_mariadb
ensure_faketime
ensure_galera
ensure_etcd
ensure_package prometheus /usr/bin/promtool "the Prometheus rules' tests, promtool's and a real Prometheus's (electionprom)"
ensure_package chromium /usr/bin/chromium "the history picture's browser test (internal/timeline)"
go test -race -count=1 -timeout 20m "$@" "$pkgs"
if ensure_tidb; then
  echo "the root package's suite against TiDB ($ELECTION_TIDB_SERVER):"
  ELECTION_TEST_SERVER=tidb go test -race -count=1 -timeout 20m "$@" github.com/sqlelect/election
fi
# Read-only commands leave a checkout as it was: the suite, and go doc,
# which once rewrote go.work.sum in a fresh clone.
go doc github.com/sqlelect/election > /dev/null
if [ -d .git ] && [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "the suite or go doc changed tracked files:" >&2
  git status --short --untracked-files=no >&2
  exit 1
fi
