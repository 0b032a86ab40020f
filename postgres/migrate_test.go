package postgres_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"superego/postgres"
	"superego/postgres/pgtest"
)

// tables lists the tables of the connection's schema, and the versions its
// schema_migrations records.
func tables(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	ctx := context.Background()
	var names string
	if err := conn.QueryRow(ctx, `SELECT coalesce(string_agg(tablename, ' ' ORDER BY tablename), '') FROM pg_tables WHERE schemaname = current_schema()`).Scan(&names); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(names, "schema_migrations") {
		return names
	}
	var versions string
	if err := conn.QueryRow(ctx, `SELECT string_agg(version || ' ' || name, ', ' ORDER BY version) FROM schema_migrations`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	return names + "; " + versions
}

// An empty database gets the schema, its version recorded; opening it
// again applies nothing.
func TestOpenMigratesAnEmptyDatabase(t *testing.T) {
	u, conn := pgtest.Database(t)
	for range 2 {
		s, err := postgres.Open(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if got, want := tables(t, conn), "experiment_outcomes experiments held log reply_cache run_leases schema_migrations texts writers; 1 log, 2 run leases, 3 keep experiments, 4 cache model replies, 5 remember where experiments write, 6 tag instances, 7 count each commit, 8 keep experiment reports"; got != want {
			t.Errorf("after opening: %q, want %q", got, want)
		}
	}
}

// Replicas that start at once on an empty database take turns: each step
// is applied once, and every one of them opens.
func TestConcurrentOpensMigrateOnce(t *testing.T) {
	u, conn := pgtest.Database(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			s, err := postgres.Open(context.Background(), u)
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	if got, want := tables(t, conn), "experiment_outcomes experiments held log reply_cache run_leases schema_migrations texts writers; 1 log, 2 run leases, 3 keep experiments, 4 cache model replies, 5 remember where experiments write, 6 tag instances, 7 count each commit, 8 keep experiment reports"; got != want {
		t.Errorf("after opening: %q, want %q", got, want)
	}
}

// A database a newer release brought past this one's versions is refused,
// naming both, and left as it was.
func TestOpenRefusesANewerDatabase(t *testing.T) {
	u, conn := pgtest.Database(t)
	s, err := postgres.Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := conn.Exec(context.Background(), `INSERT INTO schema_migrations VALUES (9, 'from the future', '2027-01-01T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(context.Background(), u)
	want := "open " + u + ": the database is at schema version 9, and this superego knows versions up to 8: use a newer superego"
	if err == nil || err.Error() != want {
		t.Fatalf("open: %v\nwant %s", err, want)
	}
	if got := tables(t, conn); got != "experiment_outcomes experiments held log reply_cache run_leases schema_migrations texts writers; 1 log, 2 run leases, 3 keep experiments, 4 cache model replies, 5 remember where experiments write, 6 tag instances, 7 count each commit, 8 keep experiment reports, 9 from the future" {
		t.Errorf("after the refusal: %q", got)
	}
}

// A step that fails is rolled back whole, and its error names it.
func TestFailedMigrationLeavesTheDatabaseAsItWas(t *testing.T) {
	u, conn := pgtest.Database(t)
	if _, err := conn.Exec(context.Background(), `CREATE TABLE held (note text)`); err != nil {
		t.Fatal(err)
	}
	_, err := postgres.Open(context.Background(), u)
	want := "open " + u + `: migration 1 (log): ERROR: relation "held" already exists (SQLSTATE 42P07)`
	if err == nil || err.Error() != want {
		t.Fatalf("open: %v\nwant %s", err, want)
	}
	if got := tables(t, conn); got != "held" {
		t.Errorf("tables after the failed step: %q", got)
	}
}

// freePort is a loopback port nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// A URL that does not parse, or a server that is not there, is an error
// at Open that says so, with the password left out. Neither needs a server.
func TestOpenBadURLOrNoServer(t *testing.T) {
	port := freePort(t)
	for _, c := range []struct{ url, want string }{
		{"postgres://superego:s3cret@127.0.0.1:notaport/db",
			"open the PostgreSQL database: cannot parse `postgres://superego:xxxxx@127.0.0.1:notaport/db`: invalid port"},
		// sslmode=disable: one attempt, where the default tries TLS first and says so too.
		{"postgres://superego:s3cret@127.0.0.1:" + port + "/db?sslmode=disable",
			"open postgres://superego:xxxxx@127.0.0.1:" + port + "/db?sslmode=disable: failed to connect to `user=superego database=db`: 127.0.0.1:" + port + " (127.0.0.1): dial error: dial tcp 127.0.0.1:" + port + ": connect: connection refused"},
	} {
		_, err := postgres.Open(context.Background(), c.url)
		if err == nil || err.Error() != c.want {
			t.Errorf("open %s:\n got %v\nwant %s", c.url, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}
