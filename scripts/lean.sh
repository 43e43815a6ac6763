#!/usr/bin/env bash
# Checks that a program importing only github.com/sqlelect/election has only
# the driver and backoff in its module graph: a throwaway module in a temp
# dir imports the package (replaced by this checkout), go mod tidy, then
# go list -m all, which must name no module beyond the allowed ones.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
allowed="leancheck github.com/sqlelect/election github.com/go-sql-driver/mysql filippo.io/edwards25519 github.com/cenkalti/backoff/v4"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
cat > go.mod <<EOF
module leancheck

go 1.25.0

require github.com/sqlelect/election v0.0.0-00010101000000-000000000000

replace github.com/sqlelect/election => $root
EOF
cat > main.go <<'EOF'
package main

import _ "github.com/sqlelect/election"

func main() {}
EOF
export GOWORK=off
go mod tidy
echo "go list -m all, in a module that imports only github.com/sqlelect/election:"
go list -m all | sed 's/^/  /'
extra=$(go list -m -f '{{.Path}}' all | grep -vxF $(printf -- '-e %s ' $allowed) || true)
if [ -n "$extra" ]; then
  echo "not lean: the election module brings in" $extra >&2
  exit 1
fi
go build -o /dev/null .
