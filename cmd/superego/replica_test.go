package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"superego/internal/eventually"
	"superego/postgres/pgtest"
)

// Two servers on one PostgreSQL database are replicas: a run started on A
// is followed live on B from a Last-Event-ID, a second run of the instance
// is refused on B, and when A is killed with -9, B goes on with the run
// within seconds: every step once, the stream on B ends with done.
func TestReplicaTakesOverAKilledReplicasRun(t *testing.T) {
	db, _ := pgtest.Database(t)
	dir := writeFlows(t)
	model := newGatedModel(t)
	a := startServer(t, dir, model, "--db", db)
	b := startServer(t, dir, model, "--db", db)
	id := startRun(t, a.addr)
	<-model.entered // steps 1-3 are recorded; the calculator's answer is pending, on A

	req, _ := http.NewRequest("GET", "http://"+b.addr+"/flow/instances/"+id+"/stream", nil)
	req.Header.Set("Last-Event-ID", "2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	followed := make(chan []string, 1)
	go func() {
		defer resp.Body.Close()
		var lines []string
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "id: ") || strings.HasPrefix(line, "event: ") {
				lines = append(lines, line)
			}
		}
		followed <- lines
	}()

	busy, err := http.Post("http://"+b.addr+"/flow/execute", "application/json", strings.NewReader(`{"flow_id": "calc", "input": "again", "instance_id": "`+id+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := io.ReadAll(busy.Body); busy.StatusCode != 409 || !strings.Contains(string(msg), "run_in_progress") {
		t.Errorf("a second run on B while A runs one: %d %s", busy.StatusCode, msg)
	}
	busy.Body.Close()

	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	killed := time.Now()
	model.open()
	var lines []string
	select {
	case lines = <-followed:
	case <-time.After(30 * time.Second):
		t.Fatalf("B did not finish the run within 30 s of A's death:\n%s", b.logs)
	}
	if took := time.Since(killed); took > 10*time.Second {
		t.Errorf("B took %s to finish the killed replica's run", took)
	}
	if n := len(lines); n < 2 || lines[n-1] != "event: done" || lines[0] != "id: 3" {
		t.Errorf("B's stream from Last-Event-ID 2: %v", lines)
	}
	checkCompletedOnce(t, history(t, b.addr, id))
	if !strings.Contains(b.logs.String(), "took over a run") {
		t.Errorf("B's log:\n%s", b.logs)
	}
}

// A cancel sent to replica B stops the run replica A is running: the run
// ends cancelled while its model call on A is still unanswered, and both
// replicas serve the same ending.
func TestCancelThroughAnotherReplica(t *testing.T) {
	t.Parallel()
	db, _ := pgtest.Database(t)
	dir := writeFlows(t)
	model := newGatedModel(t)
	defer model.open() // the fake model's held call returns, so that it can close
	a := startServer(t, dir, model, "--db", db)
	b := startServer(t, dir, model, "--db", db)
	id := startRun(t, a.addr)
	<-model.entered

	resp, err := http.Post("http://"+b.addr+"/flow/instances/"+id+"/cancel", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := io.ReadAll(resp.Body); resp.StatusCode != 202 {
		t.Fatalf("cancel on B: %d %s", resp.StatusCode, msg)
	}
	resp.Body.Close()

	eventually.Holds(t, 20*time.Second, func() string {
		resp, err := http.Get("http://" + a.addr + "/flow/instances/" + id)
		if err != nil {
			t.Fatal(err)
		}
		var inst struct{ Status string }
		json.NewDecoder(resp.Body).Decode(&inst)
		resp.Body.Close()
		if inst.Status != "cancelled" {
			return fmt.Sprintf("after a cancel on B, the run on A is %q:\nA:\n%s\nB:\n%s", inst.Status, a.logs, b.logs)
		}
		return ""
	})
	for _, addr := range []string{a.addr, b.addr} {
		events := history(t, addr, id)
		if last := events[len(events)-1]; last.name != "done" || !strings.Contains(last.data, `"status":"cancelled"`) {
			t.Errorf("%s serves the run ending with %+v", addr, last)
		}
		for _, e := range events {
			if strings.Contains(e.data, "6*7 = 42") {
				t.Errorf("%s serves an answer the cancel should have stopped: %+v", addr, e)
			}
		}
	}
}
