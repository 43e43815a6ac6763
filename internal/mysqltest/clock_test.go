package mysqltest

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// The server's clock follows StepClock, forward and back, within a
// fraction of a second, and the harness's own clock does not.
func TestStepClock(t *testing.T) {
	if PrivateBinary() == "" || FaketimeLib() == "" {
		t.Skip("needs mariadbd and the faketime package")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := StartSteppable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ahead := func() time.Duration {
		t.Helper()
		var us int64
		if err := db.QueryRowContext(ctx, "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))").Scan(&us); err != nil {
			t.Fatal(err)
		}
		return time.Until(time.UnixMicro(us))
	}
	for _, offset := range []time.Duration{0, 10 * time.Second, -20 * time.Second, 90 * time.Minute, 0} {
		if err := s.StepClock(offset); err != nil {
			t.Fatal(err)
		}
		if got := ahead(); got < offset-time.Second || got > offset+time.Second {
			t.Errorf("stepped to %v ahead of real time: the server's clock is %v ahead", offset, got)
		}
	}
}
