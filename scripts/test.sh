#!/usr/bin/env bash
# Runs the whole test suite against a real server: the one in
# $ELECTION_TEST_DSN, or a private MariaDB this script installs if needed;
# and the Galera suite against a private 3-node cluster behind HAProxy,
# whose packages it installs if needed. First it checks the protocol's SPIN
# model (scripts/spin.sh, which installs spin if needed).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/mariadb.sh
ensure_mariadb
ensure_galera
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi
bash scripts/spin.sh
go vet ./...
go test -race -count=1 -timeout 20m "$@" ./...
