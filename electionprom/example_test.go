package electionprom_test

import (
	"context"
	"database/sql"
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sqlelect/election"
	"github.com/sqlelect/election/electionprom"
)

// Register the metrics once, give each Elector their Observer, and serve
// them where Prometheus scrapes.
func Example() {
	m, err := electionprom.New(prometheus.DefaultRegisterer)
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("/metrics", promhttp.Handler())
	go http.ListenAndServe(":9090", nil)

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
