package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"superego/flow"
	"superego/flow/storetest"
	"superego/sqlite"
)

// layout is the database an earlier release left at version n: the first
// n steps, run as that release ran its schema, with no record of versions.
func layout(t *testing.T, n int) string {
	t.Helper()
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) < n {
		t.Fatalf("migrations: %v %v", files, err)
	}
	var script strings.Builder
	for _, f := range files[:n] {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		script.Write(b)
	}
	return script.String()
}

// versions are the steps schema_migrations records, in order.
func versions(t *testing.T, path string) string {
	t.Helper()
	rows, err := readRaw(t, path).Query(`SELECT version || ' ' || name FROM schema_migrations ORDER BY version`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		rows.Scan(&v)
		out = append(out, v)
	}
	return strings.Join(out, ", ")
}

const allVersions = "1 instances beside the log, 2 move instances into the log, 3 keep texts once, 4 hold unjudged events, 5 checksum each row, 6 keep experiments, 7 cache model replies, 8 remember where experiments write, 9 tag instances, 10 keep experiment reports"

// A database any release left, empty or at any layout, is brought to the
// last version by the steps it lacks, each recorded, and then works.
func TestOpenBringsEveryLayoutUpToDate(t *testing.T) {
	t.Parallel()
	for n := range 5 {
		t.Run(fmt.Sprint("from version ", n), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "superego.db")
			if n > 0 {
				writeRaw(t, path, layout(t, n))
			}
			s, err := sqlite.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			steps := strings.Split(allVersions, ", ")
			if got, want := versions(t, path), strings.Join(steps[n:], ", "); got != want {
				t.Errorf("versions recorded: %q, want %q", got, want)
			}
			if err := flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: "i", FlowID: "f"}, done) }); err != nil {
				t.Fatal(err)
			}
			if err := flow.Wait(func(done func(error)) { s.Append("i", []flow.Event{storetest.StepEvent(1)}, done) }); err != nil {
				t.Fatal(err)
			}
			if events, err := s.Events(context.Background(), "i", 0); err != nil || len(events) != 1 {
				t.Errorf("%d events, %v", len(events), err)
			}
		})
	}
}

// Opening a database at the last version again applies nothing.
func TestReopenAppliesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "superego.db")
	for range 2 {
		s, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	if got := versions(t, path); got != allVersions {
		t.Errorf("versions: %q", got)
	}
}

// A database a newer release brought past the versions this one knows is
// refused, naming both, and left as it was.
func TestOpenRefusesANewerDatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "superego.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	last := len(strings.Split(allVersions, ", "))
	writeRaw(t, path, fmt.Sprintf(`INSERT INTO schema_migrations VALUES (%d, 'from the future', '2027-01-01T00:00:00Z')`, last+1))
	_, err = sqlite.Open(path)
	want := fmt.Sprintf("open %s: the database is at schema version %d, and this superego knows versions up to %d: use a newer superego", path, last+1, last)
	if err == nil || err.Error() != want {
		t.Fatalf("open: %v\nwant %s", err, want)
	}
	if got := versions(t, path); got != fmt.Sprintf("%s, %d from the future", allVersions, last+1) {
		t.Errorf("versions after the refusal: %q", got)
	}
}
