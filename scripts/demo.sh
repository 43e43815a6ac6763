#!/usr/bin/env bash
# Runs the demo: candidate processes, the leader killed, another takes over.
# Uses $ELECTION_DSN, or a private MariaDB this script installs if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/mariadb.sh
ensure_mariadb
go run ./examples/demo "$@"
