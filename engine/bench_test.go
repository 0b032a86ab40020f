package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"

	"superego/engine"
	"superego/flow"
	"superego/memstore"
)

// BenchmarkRun is the engine alone: the guarded calculator's four node
// iterations from a fake agent that answers at once, every event encoded as
// a client would receive it.
func BenchmarkRun(b *testing.B) {
	def := mustParse(b, guarded)
	replies := map[string]engine.Reply{"in": reply("CAUTION", "ok"), "out": reply("ACCEPT", "")}
	done := reply("COMPLETE", "5*10 = 50")
	agent := agentFunc(func(t *engine.Task) (engine.Reply, error) {
		if t.Node.Name == "work" {
			if len(t.ToolRounds) == 0 {
				return toolReply, nil
			}
			return done, nil
		}
		return replies[t.Node.Name], nil
	})
	x := &engine.Executor{Agent: agent}
	emit := engine.Sink{Emit: func(evs ...flow.Event) error {
		for _, e := range evs {
			if _, err := json.Marshal(e.Data); err != nil {
				return err
			}
		}
		return nil
	}}
	b.ReportAllocs()
	for b.Loop() {
		if out := x.Execute(context.Background(), engine.Turn{FlowID: "g", Def: def, InstanceID: "i", RunID: "r", Input: "What is 5*10?"}, emit); out.Status != flow.StatusCompleted {
			b.Fatal(out)
		}
	}
}

// BenchmarkEngine adds what a server adds: instances in the store, event
// numbering, a subscriber reading the stream.
func BenchmarkEngine(b *testing.B) {
	agent := agentFunc(func(t *engine.Task) (engine.Reply, error) { return reply("ACCEPT", ""), nil })
	e := newEngine(b, agent, 0)
	b.ReportAllocs()
	for b.Loop() {
		sub, err := e.Start(context.Background(), engine.Request{FlowID: "one", Input: "hi"})
		if err != nil {
			b.Fatal(err)
		}
		for ev := range sub.Events(context.Background()) {
			if _, err := json.Marshal(ev.Data); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkRunsInFlight is what a run holds while it waits on its model:
// a thousand runs of the guarded calculator at once, each held in its
// output judge's call, and the heap (after a collection) and goroutine
// stacks they hold, per run. The runs are on new instances, watched as
// Engine.Run's callers watch them; on instances with a conversation of
// forty steps before; or followed by a subscriber that keeps up.
//
//	go test -run '^$' -bench RunsInFlight -benchtime 1x -count 5 ./flow
func BenchmarkRunsInFlight(b *testing.B) {
	const n = 1000
	for _, c := range []struct {
		name       string
		prior      int
		subscribed bool
	}{{"new", 0, false}, {"conversation", 40, false}, {"subscribed", 0, true}} {
		b.Run(c.name, func(b *testing.B) {
			var heap, stacks float64
			for range b.N {
				h, s := inFlight(b, n, c.prior, c.subscribed)
				heap, stacks = heap+h, stacks+s
			}
			b.ReportMetric(heap/float64(b.N), "heap-B/run")
			b.ReportMetric(stacks/float64(b.N), "stack-B/run")
		})
	}
}

// holdingAgent answers as the guarded calculator's nodes do, and holds
// the output judge's calls until release is closed.
type holdingAgent struct {
	waiting sync.WaitGroup
	release chan struct{}
}

func (h *holdingAgent) Act(ctx context.Context, t *engine.Task, emit func(flow.Event)) (engine.Reply, error) {
	switch {
	case t.Node.Name == "in":
		return reply("CAUTION", "ok"), nil
	case t.Node.Name == "work" && len(t.ToolRounds) == 0:
		return toolReply, nil
	case t.Node.Name == "work":
		return reply("COMPLETE", "5*10 = 50"), nil
	}
	if h.release != nil {
		h.waiting.Done()
		select {
		case <-h.release:
		case <-ctx.Done():
			return engine.Reply{}, ctx.Err()
		}
	}
	return reply("ACCEPT", ""), nil
}

// inFlight starts n runs, each on an instance with a conversation of
// prior steps before it, waits until all are held, and returns the heap
// and stack bytes they hold, per run.
func inFlight(b *testing.B, n, prior int, subscribed bool) (heap, stacks float64) {
	ctx := context.Background()
	agent := &holdingAgent{}
	e := &engine.Engine{Flows: map[string]*flow.Flow{"g": {ID: "g", Def: mustParse(b, guarded)}}, Exec: &engine.Executor{Agent: agent},
		Store: &memstore.Store{}, MaxRuns: n, Log: slog.New(slog.DiscardHandler)}
	ids := make([]string, n)
	if prior > 0 {
		said := make([]flow.Step, prior)
		for i := range said {
			said[i] = flow.Step{Role: []string{flow.RoleUser, flow.RoleAssistant}[i%2], Response: fmt.Sprintf("message %d of the conversation", i)}
		}
		for i := range ids {
			sub, err := e.Start(ctx, engine.Request{FlowID: "g", Input: "What is 5*10?", Prior: said})
			if err != nil {
				b.Fatal(err)
			}
			ids[i] = sub.Instance
			drain(sub)
		}
	}
	agent.release = make(chan struct{})
	agent.waiting.Add(n)
	var before, held runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var done sync.WaitGroup
	for _, id := range ids {
		req := engine.Request{FlowID: "g", InstanceID: id, Input: "What is 5*10?"}
		done.Go(func() {
			if !subscribed {
				if err := e.Run(ctx, req, func(flow.Event) {}); err != nil {
					b.Error(err)
				}
				return
			}
			sub, err := e.Start(ctx, req)
			if err != nil {
				b.Error(err)
				return
			}
			drain(sub)
		})
	}
	agent.waiting.Wait()
	runtime.GC()
	runtime.ReadMemStats(&held)
	close(agent.release)
	done.Wait()
	return float64(held.HeapAlloc-before.HeapAlloc) / float64(n), float64(held.StackInuse-before.StackInuse) / float64(n)
}
