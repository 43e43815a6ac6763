#!/usr/bin/env bash
# Draws the protocol's pictures: docs/term.svg and docs/record-states.svg
# from their sources in docs/diagrams (internal/diagram; standard library
# only, so the output depends on nothing but the source). Run it after
# changing a source, and commit both; the package's test (go test
# ./internal/diagram, part of go test ./...) fails while a checked-in
# picture differs from what its source draws.
set -euo pipefail
cd "$(dirname "$0")/.."
go run ./internal/diagram -src docs/diagrams -out docs
