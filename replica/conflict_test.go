package replica

import (
	"context"
	"fmt"
	"testing"

	"superego/postgres"
	"superego/postgres/pgtest"
)

// The errors PostgreSQL gives when another replica wrote a run's lease or
// events first are conflicts (ErrBusy to the client); other errors are not.
func TestIsConflict(t *testing.T) {
	u, db := pgtest.Database(t)
	ctx := context.Background()
	store, err := postgres.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
	setup := []string{
		`INSERT INTO run_leases (instance_id, expires_at) VALUES ('i', now())`,
		`INSERT INTO log (instance_id, first_seq, last_seq, flow_id, created_at, last_time, steps, sum) VALUES ('i', 0, 0, 'f', now(), now(), 0, 0)`,
		`INSERT INTO log (instance_id, first_seq, last_seq, last_time, steps, sum) VALUES ('i', 1, 3, now(), 0, 0)`,
	}
	for _, q := range setup {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for q, want := range map[string]bool{
		`INSERT INTO run_leases (instance_id, expires_at) VALUES ('i', now())`:                                                                        true,
		`INSERT INTO log (instance_id, first_seq, last_seq, last_time, steps, sum) VALUES ('i', 1, 1, now(), 0, 0)`:                                   true, // the same row again
		`INSERT INTO log (instance_id, first_seq, last_seq, last_time, steps, sum) VALUES ('i', 2, 2, now(), 0, 0)`:                                   true, // behind the log's end
		`INSERT INTO log (instance_id, first_seq, last_seq, flow_id, created_at, last_time, steps, sum) VALUES ('j', 0, 0, NULL, now(), now(), 0, 0)`: false,
		`SELECT no_such_column FROM log`: false,
	} {
		_, err := db.Exec(ctx, q)
		if err == nil {
			t.Fatalf("%s: no error", q)
		}
		if got := isConflict(fmt.Errorf("dispatch: %w", err)); got != want {
			t.Errorf("%s: %v is a conflict: %v, want %v", q, err, got, want)
		}
	}
}
