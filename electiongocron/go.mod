module github.com/sqlelect/election/electiongocron

go 1.25.0

require (
	github.com/go-co-op/gocron/v2 v2.21.2
	github.com/go-sql-driver/mysql v1.10.1
	github.com/sqlelect/election v0.0.0-00010101000000-000000000000
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
)

// Development only: the election package of this checkout. A replace in a
// dependency's go.mod is ignored, so users get the version required above:
// tag the election module first, require that version here, then tag
// electiongocron/vX.Y.Z (CONTRIBUTING.md, "Layout").
replace github.com/sqlelect/election => ../
