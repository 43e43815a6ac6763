module github.com/sqlelect/election/cmd/electbench

go 1.25.0

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/go-sql-driver/mysql v1.10.1
	github.com/sqlelect/election v0.0.0-00010101000000-000000000000
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
)

// Always the election package of this checkout: electbench measures it, and
// its tests use the harness in ../../internal. Its own module keeps its
// dependencies out of the election module's go.mod.
replace github.com/sqlelect/election => ../../
