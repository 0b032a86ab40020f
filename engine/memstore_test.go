package engine_test

import (
	"context"
	"log/slog"
	"math"
	"testing"
	"time"
	"unsafe"

	"superego/engine"
	"superego/flow"
	"superego/memstore"
)

// The texts steps repeat, a node's constitution and system prompt, are
// held once in memory however many steps and instances carry them: every
// step the store keeps refers to its node's own text, as the SQL stores
// keep each text once on disk.
func TestStepsReferToTheirNodesTexts(t *testing.T) {
	t.Parallel()
	def := mustParse(t, guarded)
	e := &engine.Engine{Flows: map[string]*flow.Flow{"g": {ID: "g", Def: def}}, Exec: &engine.Executor{Agent: &holdingAgent{}},
		Store: &memstore.Store{}, Log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	var ids []string
	for range 3 {
		if err := e.Run(ctx, engine.Request{FlowID: "g", Input: "What is 5*10?"}, func(ev flow.Event) {
			if rs, ok := ev.Data.(flow.RunStart); ok {
				ids = append(ids, rs.InstanceID)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	texts := 0
	for _, id := range ids {
		events, err := e.Store.Events(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range flow.Replay(events).Steps {
			node := def.Graph.Nodes[s.Node]
			if node == nil {
				continue // the user's
			}
			for _, pair := range [][2]string{{s.Constitution, node.Constitution}, {s.SystemPrompt, node.SystemPrompt}} {
				if pair[0] == "" {
					continue
				}
				if texts++; unsafe.StringData(pair[0]) != unsafe.StringData(pair[1]) {
					t.Errorf("instance %s step %s holds a copy of its node's text %.20q", id, s.StepID, pair[1])
				}
			}
		}
	}
	if texts < 6 { // two judges' steps in each of three instances
		t.Errorf("%d texts looked at", texts)
	}
}

// A step record is held twice while its run is in flight (the run's log,
// and its event in the store), in allocations of 448 bytes, the size
// class it fills. A field more moves every step to the next class (480):
// put it where it costs no room, or say what it is worth in
// docs/benchmarks.md and change this.
func TestAStepFitsItsSizeClass(t *testing.T) {
	t.Parallel()
	if got := unsafe.Sizeof(flow.Step{}); got != 448 {
		t.Errorf("a step record takes %d bytes, not 448", got)
	}
	if got := flow.Millis(30 * 24 * time.Hour); got != math.MaxInt32 {
		t.Errorf("30 days are recorded as %d ms, not the largest latency", got)
	}
}
