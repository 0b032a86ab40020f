package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"superego/flow"
	"superego/flow/storetest"
	"superego/sqlite"
)

func open(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "superego.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) flow.Store { return open(t) })
}

func TestWritesAfterCloseFail(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "superego.db"))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	err = flow.Wait(func(done func(error)) {
		s.Append("i", []flow.Event{{ID: 1, Name: flow.EventDone, Data: flow.Done{}}}, done)
	})
	if !errors.Is(err, sqlite.ErrClosed) {
		t.Errorf("append after close: %v", err)
	}
	if err := s.Close(); err == nil {
		t.Log("second close reports the closed handles") // either way, it must not panic
	}
}

func TestReopenKeepsTheLog(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "superego.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	next := "b"
	step := flow.Step{StepID: "1", AgentID: "user", Role: flow.RoleUser, Response: "hi", NextAgent: &next, Thinking: "T", AgentGuidance: "G"}
	flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: "i", FlowID: "f"}, done) })
	flow.Wait(func(done func(error)) {
		s.Append("i", []flow.Event{{ID: 1, Name: flow.EventCompleteStep, Data: &step}}, done)
	})
	s.Close()
	s, err = sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	events, err := s.Events(context.Background(), "i", 0)
	if err != nil || len(events) != 1 {
		t.Fatalf("%d events, %v", len(events), err)
	}
	if got := events[0].Data.(*flow.Step); got.Thinking != "T" || got.AgentGuidance != "G" || got.Response != "hi" {
		t.Errorf("step after reopening: %+v", got)
	}
}

// walPages is the store's wal_autocheckpoint.
const walPages = 8000

// The WAL is copied back into the database and reused: it must not grow
// with every commit.
func TestWALStaysBounded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "superego.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: "i", FlowID: "f", CreatedAt: time.Now()}, done) })
	// Steps of 64 KiB, sixteen pages or more a commit: three checkpoints'
	// worth of WAL in a few thousand commits.
	const commits = 1500
	big := strings.Repeat("x", 64<<10)
	for n := int64(1); n <= commits; n++ {
		e := storetest.StepEvent(n)
		step := e.Data.(*flow.Step)
		step.Response = big
		e.Data = step
		if err := flow.Wait(func(done func(error)) { s.Append("i", []flow.Event{e}, done) }); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	// Without checkpoints the WAL would hold every commit's pages; with them
	// it stays near one checkpoint's worth.
	if limit := int64(walPages) * 4096 * 3 / 2; fi.Size() > limit {
		t.Errorf("WAL is %d bytes after %d commits (limit %d): checkpoints are not running", fi.Size(), commits, limit)
	}
}

// A database written before instances moved into the log opens with every
// instance, event and hidden field in place, and takes new events.
func TestOpenMigratesSeparateInstances(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "superego.db")
	writeRaw(t, path, `
CREATE TABLE instances (id TEXT PRIMARY KEY, flow_id TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE log (
	instance_id TEXT NOT NULL REFERENCES instances (id), first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,
	last_time TEXT NOT NULL, steps INTEGER NOT NULL, status TEXT, events TEXT NOT NULL, hidden TEXT,
	PRIMARY KEY (instance_id, first_seq));
CREATE TRIGGER log_only_grows BEFORE INSERT ON log
WHEN NEW.first_seq <= (SELECT last_seq FROM log WHERE instance_id = NEW.instance_id ORDER BY first_seq DESC LIMIT 1)
BEGIN SELECT RAISE(ABORT, 'event ids only grow'); END;
INSERT INTO instances VALUES ('old', 'f', '2026-11-20T10:00:00.000000000Z'), ('new', 'g', '2026-11-20T11:00:00.000000000Z');
INSERT INTO log VALUES ('old', 1, 2, '2026-11-20T10:00:02.000000000Z', 1, 'running',
	'[{"id":1,"name":"run_start","time":"2026-11-20T10:00:01.000000000Z","data":{"instance_id":"old","run_id":"r","flow_id":"f"}},{"id":2,"name":"complete_step","time":"2026-11-20T10:00:02.000000000Z","data":{"step_id":"1","agent_id":"a","role":"assistant","input":"","response":"hi","next_agent":null}}]',
	'{"2":{"thinking":"T-old","agent_guidance":"G-old"}}'),
	('old', 3, 3, '2026-11-20T10:00:03.000000000Z', 0, 'completed',
	'[{"id":3,"name":"done","time":"2026-11-20T10:00:03.000000000Z","data":{"instance_id":"old","status":"completed","response":"hi"}}]', NULL);`)

	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	inst, err := s.Get(ctx, "old")
	if err != nil || inst.FlowID != "f" || inst.CreatedAt.Hour() != 10 {
		t.Fatalf("get: %+v %v", inst, err)
	}
	events, err := s.Events(ctx, "old", 0)
	if err != nil || len(events) != 3 {
		t.Fatalf("%d events, %v", len(events), err)
	}
	if step := events[1].Data.(*flow.Step); step.Response != "hi" || step.Thinking != "T-old" || step.AgentGuidance != "G-old" {
		t.Errorf("step: %+v", step)
	}
	list, err := s.List(ctx, flow.ListOptions{})
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if got := fmt.Sprint(list[0].ID, list[0].Status, list[0].Steps, " ", list[1].ID, list[1].Status, list[1].Steps, " ", list[1].UpdatedAt.Format(time.TimeOnly)); got != "newnew0 oldcompleted1 10:00:03" {
		t.Errorf("list: %s", got)
	}
	if err := flow.Wait(func(done func(error)) { s.Append("old", []flow.Event{storetest.StepEvent(3)}, done) }); err == nil {
		t.Error("event 3 appended twice")
	}
	if err := flow.Wait(func(done func(error)) { s.Append("new", []flow.Event{storetest.StepEvent(1)}, done) }); err != nil {
		t.Errorf("append after migrating: %v", err)
	}
	db := readRaw(t, path)
	var tables string
	if err := db.QueryRow(`SELECT group_concat(name, ' ') FROM (SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name)`).Scan(&tables); err != nil || tables != "experiment_outcomes experiments held log reply_cache schema_migrations texts" {
		t.Errorf("tables after migrating: %q %v", tables, err)
	}
}

// A create and an append queued together both land, whether one commit
// takes them or two, and an event for an instance nobody created fails
// alone.
func TestBatchCreatesAndAppends(t *testing.T) {
	t.Parallel()
	s := open(t)
	errs := make(chan error, 3)
	s.Create(flow.Instance{ID: "i", FlowID: "f", CreatedAt: time.Now()}, func(err error) { errs <- err })
	s.Append("i", []flow.Event{storetest.StepEvent(1)}, func(err error) { errs <- err })
	s.Append("nobody", []flow.Event{storetest.StepEvent(1)}, func(err error) { errs <- err })
	if err := <-errs; err != nil {
		t.Errorf("create: %v", err)
	}
	if err := <-errs; err != nil {
		t.Errorf("append: %v", err)
	}
	if err := <-errs; err == nil {
		t.Error("appended to an instance nobody created")
	}
	events, err := s.Events(context.Background(), "i", 0)
	if err != nil || len(events) != 1 {
		t.Errorf("%d events, %v", len(events), err)
	}
}

// A database the migration cannot move, one from before the log had its
// segments, is refused with what went wrong, and left as it was.
func TestOpenRefusesADatabaseItCannotMove(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "superego.db")
	writeRaw(t, path, `CREATE TABLE instances (id TEXT PRIMARY KEY, flow_id TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE events (instance_id TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL);
INSERT INTO instances VALUES ('i', 'f', '2026-11-20T10:00:00.000000000Z');`)
	_, err := sqlite.Open(path)
	want := "open " + path + ": migration 2 (move instances into the log): "
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "no such table: log") {
		t.Fatalf("open: %v, want %q and no such table: log", err, want)
	}
	db := readRaw(t, path)
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM instances`).Scan(&n); err != nil || n != 1 {
		t.Errorf("instances after the refusal: %d %v", n, err)
	}
	if got := versions(t, path); !strings.Contains(got, "no such table: schema_migrations") {
		t.Errorf("versions recorded after the refusal: %q", got)
	}
}

// A constitution or system prompt is stored once, however many steps carry
// it, and every step reads back with its own.
func TestTextsAreKeptOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "superego.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	constitution, prompt := strings.Repeat("Be honest. ", 200), "You add numbers."
	steps := func(i int) []flow.Step {
		return []flow.Step{
			{StepID: "1", AgentID: "user", Role: flow.RoleUser, Response: "hi"},
			{StepID: "2", AgentID: "in", Role: flow.RoleAssistant, Constitution: constitution, Decision: "ACCEPT", Thinking: fmt.Sprint("T", i)},
			{StepID: "3", AgentID: "calc", Role: flow.RoleAssistant, SystemPrompt: prompt, Decision: "COMPLETE", Response: "2"},
			{StepID: "4", AgentID: "out", Role: flow.RoleAssistant, Constitution: "Short and other.", Decision: "ACCEPT"},
		}
	}
	// write makes instance i with its steps.
	write := func(s *sqlite.Store, i int) {
		id := fmt.Sprint("i", i)
		if err := flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: id, FlowID: "f", CreatedAt: time.Now()}, done) }); err != nil {
			t.Fatal(err)
		}
		for n, step := range steps(i) {
			if err := flow.Wait(func(done func(error)) {
				s.Append(id, []flow.Event{{ID: int64(n + 1), Name: flow.EventCompleteStep, Time: time.Now(), Data: &step}}, done)
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 3 {
		write(s, i)
	}
	s.Close()
	if s, err = sqlite.Open(path); err != nil { // a new store reads the texts from the database,
		t.Fatal(err)
	}
	defer s.Close()
	write(s, 3) // and finds them there when it writes them again
	for i := range 4 {
		events, err := s.Events(context.Background(), fmt.Sprint("i", i), 0)
		if err != nil || len(events) != 4 {
			t.Fatalf("%d events, %v", len(events), err)
		}
		for n, want := range steps(i) {
			if got := events[n].Data.(*flow.Step); got.Constitution != want.Constitution || got.SystemPrompt != want.SystemPrompt || got.Thinking != want.Thinking {
				t.Errorf("instance %d step %d: %+v", i, n+1, got)
			}
		}
	}
	db := readRaw(t, path)
	var texts, inline int
	if err := db.QueryRow(`SELECT count(*) FROM texts`).Scan(&texts); err != nil || texts != 3 {
		t.Errorf("%d texts, want 3: %v", texts, err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM log WHERE events LIKE '%Be honest%' OR events LIKE '%You add%'`).Scan(&inline); err != nil || inline != 0 {
		t.Errorf("%d segments hold a text inline: %v", inline, err)
	}
}

// logBeforeTexts is the log as it was before texts were kept apart.
const logBeforeTexts = `
CREATE TABLE log (
	instance_id TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, flow_id TEXT, created_at TEXT,
	last_time TEXT NOT NULL, steps INTEGER NOT NULL, status TEXT, events TEXT, hidden TEXT,
	PRIMARY KEY (instance_id, first_seq));`

// A log written before texts were kept apart opens, its steps read with
// the texts they hold inline, and it takes new steps.
func TestOpenAddsTextsToAnInlineLog(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "superego.db")
	writeRaw(t, path, logBeforeTexts+`
INSERT INTO log VALUES ('i', 0, 0, 'f', '2026-11-20T10:00:00.000000000Z', '2026-11-20T10:00:00.000000000Z', 0, NULL, NULL, NULL),
	('i', 1, 1, NULL, NULL, '2026-11-20T10:00:01.000000000Z', 1, NULL,
	'[{"id":1,"name":"complete_step","time":"2026-11-20T10:00:01.000000000Z","data":{"step_id":"1","agent_id":"a","role":"assistant","input":"","constitution":"Be kind.","response":"hi","next_agent":null}}]',
	'{"1":{"thinking":"T","agent_guidance":"G"}}');`)
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := flow.Wait(func(done func(error)) { s.Append("i", []flow.Event{storetest.StepEvent(2)}, done) }); err != nil {
		t.Fatalf("append after adding texts: %v", err)
	}
	events, err := s.Events(context.Background(), "i", 0)
	if err != nil || len(events) != 2 {
		t.Fatalf("%d events, %v", len(events), err)
	}
	if old := events[0].Data.(*flow.Step); old.Constitution != "Be kind." || old.Thinking != "T" {
		t.Errorf("old step: %+v", old)
	}
	if step := events[1].Data.(*flow.Step); step.Constitution != "Be helpful." {
		t.Errorf("new step: %+v", step)
	}
}

// writeRaw runs script on the database at path through the driver alone,
// as an earlier version, or a user's sqlite3, would have.
func writeRaw(t *testing.T, path, script string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(script); err != nil {
		t.Fatal(err)
	}
}

// readRaw opens the database at path through the driver alone, to look at
// what the store wrote.
func readRaw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// A log the store cannot bring up to date is refused with what went wrong,
// and left as it was.
func TestOpenRefusesALogItCannotAddTextsTo(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "superego.db")
	writeRaw(t, path, logBeforeTexts+`
CREATE TABLE texts (note TEXT);`)
	_, err := sqlite.Open(path)
	want := "open " + path + ": migration 3 (keep texts once): "
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "table texts already exists") {
		t.Fatalf("open: %v, want %q and table texts already exists", err, want)
	}
	var n int
	if err := readRaw(t, path).QueryRow(`SELECT count(*) FROM pragma_table_info('log') WHERE name = 'texts'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("log gained a texts column though the upgrade failed: %d %v", n, err)
	}
	if got := versions(t, path); !strings.Contains(got, "no such table: schema_migrations") {
		t.Errorf("versions recorded after the refusal: %q", got)
	}
}
