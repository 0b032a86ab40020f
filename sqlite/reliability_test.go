package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"superego/engine"
	"superego/flow"
	"superego/flow/storetest"
	"superego/sqlite"
)

func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd to count open files in")
	}
	return len(fds)
}

// A burst of concurrent reads waits for the read pool instead of opening
// a connection, and its files, each: the files open after it stay few.
func TestReadBurstKeepsOpenFilesBounded(t *testing.T) {
	s := open(t)
	flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: "i", FlowID: "f", CreatedAt: time.Now()}, done) })
	// Reads of forty rows each last long enough to overlap.
	for n := int64(1); n <= 40; n++ {
		flow.Wait(func(done func(error)) { s.Append("i", []flow.Event{storetest.StepEvent(n)}, done) })
	}
	start := make(chan struct{})
	before := openFiles(t)
	// The most files open while the burst lasts, counted as it goes.
	peak, stop := make(chan int), make(chan struct{})
	go func() {
		most := 0
		for {
			most = max(most, openFiles(t))
			select {
			case <-stop:
				peak <- most
				return
			default:
			}
		}
	}()
	var wg sync.WaitGroup
	for range 600 {
		wg.Go(func() {
			<-start
			if events, err := s.Events(context.Background(), "i", 0); err != nil || len(events) != 40 {
				t.Errorf("%d events, %v", len(events), err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(stop)
	// A read connection holds the database, its WAL and its shared memory:
	// three files each, for at most the pool's connections.
	if most, after := <-peak, openFiles(t); most-before > 3*16 || after-before > 3*16 {
		t.Errorf("%d files open before 600 concurrent reads, %d at most during them, %d after", before, most, after)
	}
}

// A byte changed in a stored row, by anything but the store, is reported
// when the row is read, naming the instance and the row, and never served.
func TestChangedRowIsReportedNotServed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "superego.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, id := range []string{"good", "bad"} {
		flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: id, FlowID: "f", CreatedAt: time.Now()}, done) })
		flow.Wait(func(done func(error)) {
			s.Append(id, []flow.Event{storetest.StepEvent(1), storetest.StepEvent(2)}, done)
		})
		flow.Wait(func(done func(error)) { s.Append(id, []flow.Event{storetest.StepEvent(3)}, done) })
	}
	held := storetest.StepEvent(0)
	if err := flow.Wait(func(done func(error)) { s.Hold("bad", held, done) }); err != nil {
		t.Fatal(err)
	}
	raw := readRaw(t, path)
	for _, change := range []string{
		`UPDATE log SET events = replace(events, '"response":"ok"', '"response":"OK"') WHERE instance_id = 'bad' AND first_seq = 1`,
		`UPDATE held SET data = replace(data, '"response":"ok"', '"response":"OK"') WHERE instance_id = 'bad'`,
	} {
		if _, err := raw.Exec(change); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.Events(ctx, "bad", 0)
	if want := `instance "bad": the row of events 1 to 2: corrupt: the stored bytes do not match their checksum`; err == nil || err.Error() != want || !errors.Is(err, flow.ErrCorrupt) {
		t.Errorf("events of a changed row: %v\nwant %s", err, want)
	}
	// The rows after it read as they were written.
	if events, err := s.Events(ctx, "bad", 2); err != nil || len(events) != 1 {
		t.Errorf("events after the changed row: %d, %v", len(events), err)
	}
	_, err = s.Held(ctx, "bad")
	if want := `instance "bad": held event 1: corrupt: the stored bytes do not match their checksum`; err == nil || err.Error() != want {
		t.Errorf("held: %v\nwant %s", err, want)
	}
	if events, err := s.Events(ctx, "good", 0); err != nil || len(events) != 3 {
		t.Errorf("the other instance: %d events, %v", len(events), err)
	}
	// A text is checked as the rows are.
	if _, err := raw.Exec(`UPDATE texts SET body = 'Be harmful.'`); err != nil {
		t.Fatal(err)
	}
	s2, err := sqlite.Open(path) // a store that has not read the text yet
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	_, err = s2.Events(ctx, "good", 0)
	if want := `instance "good": text 1: corrupt: the stored bytes do not match their checksum`; err == nil || err.Error() != want {
		t.Errorf("events with a changed text: %v\nwant %s", err, want)
	}
}

// answers is an agent that answers at once: a long answer, so that a run
// needs pages of its own.
type answers struct{}

func (answers) Act(_ context.Context, t *engine.Task, _ func(flow.Event)) (engine.Reply, error) {
	return engine.Reply{Decision: "ACCEPT", Response: strings.Repeat("The answer is 42. ", 300)}, nil
}

// A real full disk, as SQLite meets it: the database may not grow. A client
// is told a run completed only where its log says so; every other run ends
// failed with code storage; the file stays whole; and once there is room
// again, cancel records the endings the disk refused, and no instance is
// left running.
func TestSQLiteOnAFullDisk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "superego.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	def, err := flow.Parse([]byte(`{"name": "one", "graph": {"start": "s", "nodes": {
	  "s": {"type": "superego", "agent_id": "s", "constitution": "c", "transitions": {"ACCEPT": null}}}}}`), flow.Catalog{})
	if err != nil {
		t.Fatal(err)
	}
	e := &engine.Engine{Flows: map[string]*flow.Flow{"one": {ID: "one", Def: def}}, Exec: &engine.Executor{Agent: answers{}}, Store: s,
		Log: slog.New(slog.DiscardHandler)}
	defer e.Close(ctx)
	if _, err := s.LimitPages(8); err != nil {
		t.Fatal(err)
	}
	told := map[string]string{} // instance → the status its client was told
	codes := map[string]int{}
	for i := range 40 {
		sub, err := e.Start(ctx, engine.Request{FlowID: "one", Input: fmt.Sprintf("What is %d*7?", i)})
		if err != nil {
			t.Fatal(err)
		}
		var status string
		for ev := range sub.Events(ctx) {
			switch d := ev.Data.(type) {
			case flow.Done:
				status = d.Status
			case flow.ErrorData:
				codes[d.Code]++
			}
		}
		told[sub.Instance] = status
	}
	if codes["storage"] == 0 || len(codes) > 1 {
		t.Errorf("error codes of 40 runs on a full disk: %v", codes)
	}
	check := func(when string) (running int) {
		for id, status := range told {
			events, err := e.Events(ctx, id, 0)
			switch {
			case errors.Is(err, flow.ErrNotFound) && status == flow.StatusFailed:
				continue // never created
			case err != nil:
				t.Fatalf("%s: %s: %v", when, id, err)
			}
			logged := flow.Replay(events).Status
			if status == flow.StatusCompleted && logged != flow.StatusCompleted {
				t.Errorf("%s: a client was told %s completed; its log says %s", when, id, logged)
			}
			if status != flow.StatusCompleted && status != flow.StatusFailed {
				t.Errorf("%s: a client was told %s is %q", when, id, status)
			}
			if stored, _ := s.Events(ctx, id, 0); flow.Replay(stored).Status == flow.StatusRunning {
				running++
			}
		}
		return running
	}
	check("on a full disk")
	var integrity string
	if err := readRaw(t, path).QueryRow(`PRAGMA integrity_check`).Scan(&integrity); err != nil || integrity != "ok" {
		t.Errorf("integrity_check: %q, %v", integrity, err)
	}
	if _, err := s.LimitPages(1 << 20); err != nil {
		t.Fatal(err)
	}
	for id := range told {
		e.Cancel(ctx, id) // records an ending the disk refused; idle otherwise
	}
	if n := check("with room again"); n > 0 {
		t.Errorf("%d instances left running", n)
	}
	t.Logf("40 runs on a full disk: %d told completed, error codes %v", 40-codes["storage"], codes)
}
