module github.com/sqlelect/election

go 1.25.0

require (
	github.com/cenkalti/backoff/v4 v4.3.0
	github.com/go-sql-driver/mysql v1.10.1
)

require filippo.io/edwards25519 v1.2.0 // indirect
