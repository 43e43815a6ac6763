package electionotel_test

import (
	"context"
	"database/sql"
	"log"

	"go.opentelemetry.io/otel"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/electionotel"
)

// Create the instruments once with the global MeterProvider's Meter (set
// up by the program's OpenTelemetry SDK and exporter), and give each
// Elector their Observer.
func Example() {
	m, err := electionotel.New(otel.Meter("github.com/sqlelect/election"))
	if err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("mysql", "app:secret@tcp(db:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	e, err := election.New(db, "billing-cron", election.Config{Observer: m.Observer()})
	if err != nil {
		log.Fatal(err)
	}
	err = e.Run(context.Background(), func(ctx context.Context, t *election.Term) error {
		<-ctx.Done() // lead until the term or the service ends
		return nil
	})
	log.Print(err)
}
