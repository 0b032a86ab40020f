package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"superego/flow"
	"superego/postgres"
	"superego/postgres/pgtest"
)

var markers = []string{"THINKING-MARKER", "GUIDANCE-MARKER", "WITHHELD-RESPONSE-MARKER", "WITHHELD-TOOL-MARKER"}

// leaks names the markers s holds.
func leaks(s string) []string {
	var out []string
	for _, m := range markers {
		if strings.Contains(s, m) {
			out = append(out, m)
		}
	}
	return out
}

// A run with hidden fields planted: a judge's thinking and guidance, and a
// withheld draft, whose response and tool usage only the research view
// may show.
func plantedRun(t0 time.Time) []flow.Event {
	next := "calc"
	judge := flow.Step{StepID: "2", AgentID: "in", Node: "in", Role: flow.RoleAssistant, Timestamp: t0, Constitution: "Judge.", Decision: "CAUTION",
		Response: "ok", NextAgent: &next, Thinking: "THINKING-MARKER", AgentGuidance: "GUIDANCE-MARKER"}
	withheld := flow.Step{StepID: "3", AgentID: "calc", Node: "calc", Role: flow.RoleAssistant, Timestamp: t0, SystemPrompt: "Add.", Decision: "COMPLETE",
		Withheld: "out", WithheldResponse: "WITHHELD-RESPONSE-MARKER",
		WithheldToolUsage: []flow.ToolUse{{ToolName: "calculator", Input: []byte(`{}`), Output: "WITHHELD-TOOL-MARKER"}}}
	return []flow.Event{
		{ID: 1, Name: flow.EventRunStart, Time: t0, Data: flow.RunStart{InstanceID: "i", RunID: "r", FlowID: "f"}},
		{ID: 2, Name: flow.EventCompleteStep, Time: t0, Data: &flow.Step{StepID: "1", AgentID: "user", Role: flow.RoleUser, Timestamp: t0, Response: "hi", NextAgent: &next}},
		{ID: 3, Name: flow.EventCompleteStep, Time: t0, Data: &judge},
		{ID: 4, Name: flow.EventCompleteStep, Time: t0, Data: &withheld},
		{ID: 5, Name: flow.EventDone, Time: t0, Data: flow.Done{InstanceID: "i", Status: flow.StatusBlocked}},
	}
}

// Hidden fields come back from Events only in the steps' hidden fields:
// never in what a client is sent (an event's JSON), nor in a listing, nor
// in the log's visible column in the database; held events keep them
// apart too.
func TestHiddenFieldsStayHidden(t *testing.T) {
	u, conn := pgtest.Database(t)
	s, err := postgres.Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	run := plantedRun(t0)
	if err := flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: "i", FlowID: "f", CreatedAt: t0}, done) }); err != nil {
		t.Fatal(err)
	}
	// The run's first events in the commit that creates it, the rest after.
	if err := flow.Wait(func(done func(error)) { s.Append("i", run[:3], done) }); err != nil {
		t.Fatal(err)
	}
	if err := flow.Wait(func(done func(error)) { s.Hold("i", run[3], done) }); err != nil {
		t.Fatal(err)
	}
	if err := flow.Wait(func(done func(error)) { s.Settle("i", run[3:], done) }); err != nil {
		t.Fatal(err)
	}
	if err := flow.Wait(func(done func(error)) { s.Hold("i", run[2], done) }); err != nil { // a judge's step held, as a speculative turn's would be
		t.Fatal(err)
	}

	events, err := s.Events(ctx, "i", 0)
	if err != nil || len(events) != 5 {
		t.Fatalf("%d events, %v", len(events), err)
	}
	var found []string
	for _, e := range events {
		b, _ := json.Marshal(e.Data)
		if l := leaks(string(b)); l != nil {
			t.Errorf("event %d's JSON holds %v: %s", e.ID, l, b)
		}
		if step, ok := e.Data.(*flow.Step); ok {
			b, _ := json.Marshal(flow.HiddenOf(*step))
			found = append(found, leaks(string(b))...)
		}
	}
	if strings.Join(found, " ") != strings.Join(markers, " ") {
		t.Errorf("hidden fields read back: %v, want %v", found, markers)
	}
	list, _ := s.List(ctx, flow.ListOptions{})
	if b, _ := json.Marshal(list); leaks(string(b)) != nil {
		t.Errorf("the listing holds %v: %s", leaks(string(b)), b)
	}
	held, err := s.Held(ctx, "i")
	if err != nil || len(held) != 1 {
		t.Fatalf("%d held, %v", len(held), err)
	}
	if step := held[0].Data.(*flow.Step); step.Thinking != "THINKING-MARKER" || step.AgentGuidance != "GUIDANCE-MARKER" {
		t.Errorf("held step: %+v", step)
	}

	var visible, hidden, heldData string
	if err := conn.QueryRow(ctx, `SELECT string_agg(coalesce(events::text, ''), ' '), string_agg(coalesce(hidden::text, ''), ' ') FROM log`).Scan(&visible, &hidden); err != nil {
		t.Fatal(err)
	}
	if l := leaks(visible); l != nil {
		t.Errorf("the log's events column holds %v", l)
	}
	if l := leaks(hidden); len(l) != len(markers) {
		t.Errorf("the log's hidden column holds %v, want all of %v", l, markers)
	}
	if err := conn.QueryRow(ctx, `SELECT string_agg(data::text, ' ') FROM held`).Scan(&heldData); err != nil {
		t.Fatal(err)
	}
	if l := leaks(heldData); l != nil {
		t.Errorf("the held table's data column holds %v", l)
	}
}

// A byte changed in a stored row is reported when it is read, naming the
// instance and the row, and never served; hidden fields stay out of the
// error.
func TestChangedRowIsReportedNotServed(t *testing.T) {
	u, conn := pgtest.Database(t)
	s, err := postgres.Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	run := plantedRun(t0)
	for _, id := range []string{"good", "bad"} {
		flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: id, FlowID: "f", CreatedAt: t0}, done) })
		flow.Wait(func(done func(error)) { s.Append(id, run[:3], done) })
		flow.Wait(func(done func(error)) { s.Append(id, run[3:], done) })
	}
	flow.Wait(func(done func(error)) { s.Hold("bad", run[2], done) })
	for _, change := range []string{
		`UPDATE log SET events = replace(events::text, '"response":"ok"', '"response":"OK"')::json WHERE instance_id = 'bad' AND first_seq = 1`,
		`UPDATE held SET data = replace(data::text, '"response":"ok"', '"response":"OK"')::json`,
	} {
		if tag, err := conn.Exec(ctx, change); err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("%s: %v %v", change, tag, err)
		}
	}
	_, err = s.Events(ctx, "bad", 0)
	if want := `instance "bad": the row of events 1 to 3: corrupt: the stored bytes do not match their checksum`; err == nil || err.Error() != want || !errors.Is(err, flow.ErrCorrupt) {
		t.Errorf("events of a changed row: %v\nwant %s", err, want)
	}
	if events, err := s.Events(ctx, "bad", 3); err != nil || len(events) != 2 {
		t.Errorf("events after the changed row: %d, %v", len(events), err)
	}
	_, err = s.Held(ctx, "bad")
	if want := `instance "bad": held event 1: corrupt: the stored bytes do not match their checksum`; err == nil || err.Error() != want {
		t.Errorf("held: %v\nwant %s", err, want)
	}
	if events, err := s.Events(ctx, "good", 0); err != nil || len(events) != 5 {
		t.Errorf("the other instance: %d events, %v", len(events), err)
	}
	if _, err := conn.Exec(ctx, `UPDATE texts SET body = 'Be harmful.' WHERE body = 'Judge.'`); err != nil {
		t.Fatal(err)
	}
	s2, err := postgres.Open(ctx, u) // a store that has not read the texts yet
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	_, err = s2.Events(ctx, "good", 0)
	if want := `instance "good": text 1: corrupt: the stored bytes do not match their checksum`; err == nil || err.Error() != want {
		t.Errorf("events with a changed text: %v\nwant %s", err, want)
	}
}
