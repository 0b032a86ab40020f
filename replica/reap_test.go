package replica_test

import (
	"context"
	"testing"
	"time"

	"superego/flow"
	"superego/postgres"
	"superego/postgres/pgtest"
)

// A dead replica's runs are taken over each on its own: a lease whose row
// cannot be updated (a trigger refuses it) stays as it is, for the next
// pass, and stops no other run's takeover; a lease whose job is gone gets a
// new one. The two runs go on here, once each.
func TestReaperTakesEachRunOverAlone(t *testing.T) {
	u, db := pgtest.Database(t)
	ctx := context.Background()
	// The dead replica's two runs, at their start: a run_start and the
	// user's step, no done.
	store, err := postgres.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	next, now := "input_superego", time.Now().UTC()
	runs := []string{"job-gone", "no-job"}
	for _, id := range append(runs, "poisoned") {
		if err := flow.Wait(func(done func(error)) { store.Create(flow.Instance{ID: id, FlowID: "calc", CreatedAt: now}, done) }); err != nil {
			t.Fatal(err)
		}
		err := flow.Wait(func(done func(error)) {
			store.Append(id, []flow.Event{
				{ID: 1, Name: flow.EventRunStart, Time: now, Data: flow.RunStart{InstanceID: id, RunID: "r-" + id, FlowID: "calc"}},
				{ID: 2, Name: flow.EventCompleteStep, Time: now, Data: &flow.Step{StepID: "1", AgentID: "user", Role: flow.RoleUser, Timestamp: now, Response: "6*7", NextAgent: &next}},
			}, done)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	store.Close()

	g := newGate()
	g.release()
	e := replicaOf(t, u, model(t, g), 8)
	for _, q := range []string{
		`CREATE FUNCTION poisoned() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'a row that cannot change'; END $$`,
		`CREATE TRIGGER poisoned BEFORE UPDATE ON run_leases FOR EACH ROW WHEN (OLD.instance_id = 'poisoned') EXECUTE FUNCTION poisoned()`,
		`INSERT INTO run_leases (instance_id, owner, expires_at, started, job_id) VALUES
		('poisoned', 'a dead replica', now() - interval '1 minute', true, NULL),
		('job-gone', 'a dead replica', now() - interval '1 minute', true, 987654321),
		('no-job', 'a dead replica', now() - interval '1 minute', true, NULL)`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, id := range runs {
		sub, err := e.Subscribe(wait, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		var last flow.Event
		starts := 0
		for ev := range sub.Events(wait) {
			last = ev
			if ev.Name == flow.EventRunStart {
				starts++
			}
		}
		sub.Close()
		if d, ok := last.Data.(flow.Done); !ok || d.Status != flow.StatusCompleted || starts != 2 {
			t.Errorf("%s: %d run starts, last event %+v; want it taken over once and completed", id, starts, last)
		}
	}
	var owner string
	if err := db.QueryRow(ctx, `SELECT owner FROM run_leases WHERE instance_id = 'poisoned'`).Scan(&owner); err != nil || owner != "a dead replica" {
		t.Errorf("the lease that cannot change: %q %v", owner, err)
	}
}
