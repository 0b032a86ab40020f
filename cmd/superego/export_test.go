package main

import (
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"superego/flow"
	"superego/sqlite"
)

// export past an instance it cannot read: the others are exported, the
// bad one is named on stderr with the reason, and the exit code says so.
func TestExportSkipsAnUnreadableInstance(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "superego.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for i, id := range []string{"a", "b", "c"} {
		created := t0.Add(time.Duration(i) * time.Minute)
		flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: id, FlowID: "f", CreatedAt: created}, done) })
		flow.Wait(func(done func(error)) {
			s.Append(id, []flow.Event{{ID: 1, Name: flow.EventCompleteStep, Time: created, Data: &flow.Step{StepID: "1", AgentID: "user", Role: flow.RoleUser,
				Response: "hi " + id, Thinking: "HIDDEN-THINKING", AgentGuidance: "HIDDEN-GUIDANCE"}}}, done)
		})
	}
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE log SET events = replace(events, 'hi b', 'hi B') WHERE instance_id = 'b'`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	for _, args := range [][]string{{"export"}, {"export", "--include-hidden"}} {
		code, out, errs := runCmd(t, env("SUPEREGO_DB", path), args...)
		want := `superego export: skipped: instance "b": the row of event 1: corrupt: the stored bytes do not match their checksum
superego export: 1 of 3 instances skipped
`
		if code != exitFailed || errs != want {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit %d, stderr:\n%s", args, code, errs, exitFailed, want)
		}
		if got := strings.Count(out, "\n"); got != 2 || !strings.Contains(out, `"instance_id":"a"`) || !strings.Contains(out, `"instance_id":"c"`) || strings.Contains(out, "hi B") {
			t.Errorf("%v: exported\n%s", args, out)
		}
		if hidden := strings.Contains(out, "HIDDEN-"); hidden != (len(args) == 2) {
			t.Errorf("%v: hidden fields in the export: %v\n%s", args, hidden, out)
		}
	}
}

// Export reads: a database file that is not there is named, and exits
// non-zero, and no empty database is left in its place.
func TestExportOfAMissingDatabase(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "typo.db")
	code, out, errs := runCmd(t, env(), "export", "--db", missing)
	if code == 0 || out != "" || errs != "superego export: --db "+missing+": no such file or directory\n" {
		t.Errorf("%d %q %q", code, out, errs)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("export made %s: %v", missing, err)
	}
}
