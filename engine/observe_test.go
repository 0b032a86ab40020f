package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"superego/engine"
	"superego/flow"
	"superego/memstore"
)

// recorder is an observer that writes down what it is told.
type recorder struct {
	mu     sync.Mutex
	seen   []string
	writes int
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, fmt.Sprintf(format, args...))
}

type ctxKey struct{}

func (r *recorder) observer() *engine.Observer {
	return &engine.Observer{
		RunStarted: func(ctx context.Context, run engine.RunInfo) context.Context {
			r.add("run %s started", run.FlowID)
			return context.WithValue(ctx, ctxKey{}, "run")
		},
		RunEnded: func(ctx context.Context, run engine.RunInfo, status, code string) {
			r.add("run %s ended %s%s, in %v", run.FlowID, status, code, ctx.Value(ctxKey{}))
		},
		NodeStarted: func(ctx context.Context, it engine.Iteration) context.Context {
			if it.RunID == "" || it.InstanceID == "" || ctx.Value(ctxKey{}) != "run" {
				r.add("node %s without its run", it.Node.Name)
			}
			return ctx
		},
		NodeEnded: func(ctx context.Context, it engine.Iteration, decision, code string) {
			r.add("node %s step %s speculative %v: %s%s", it.Node.Name, it.StepID, it.Speculative, decision, code)
		},
		Stepped: func(flowID, node, decision string) { r.add("step %s %s %s", flowID, node, decision) },
		Drafted: func(flowID, node string, released bool) { r.add("draft %s %s released %v", flowID, node, released) },
		Wrote: func(d time.Duration) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.writes++
		},
	}
}

// The observer sees a speculative turn adopted as the run's own, its
// draft withheld, and a decision that only "*" took as "*".
func TestObserverSeesRunsNodesStepsAndDrafts(t *testing.T) {
	t.Parallel()
	const def = `{"name": "s", "graph": {"start": "in", "nodes": {
	  "in":   {"type": "superego", "agent_id": "in", "constitution": "c", "speculate": true,
	           "transitions": {"BLOCK": null, "ACCEPT": "work", "CAUTION": "work"}},
	  "work": {"type": "inner_agent", "agent_id": "work", "tools": ["calculator"], "transitions": {"COMPLETE": "out"}},
	  "out":  {"type": "superego", "agent_id": "out", "constitution": "c2", "transitions": {"ACCEPT": null, "BLOCK": null, "*": null}}
	}}}`
	for _, c := range []struct {
		out  string
		want []string
	}{
		{"BLOCK", []string{
			"run s started",
			"node in step 2 speculative false: ACCEPT",
			"node work step 3 speculative true: NEEDS_TOOL",
			"node work step 4 speculative true: COMPLETE",
			"step s in ACCEPT",
			"step s work NEEDS_TOOL",
			"step s work COMPLETE",
			"node out step 5 speculative false: BLOCK",
			"step s out BLOCK",
			"draft s work released false",
			"run s ended blocked, in run",
		}},
		{"SOME_WORD_A_MODEL_MADE_UP", []string{
			"run s started",
			"node in step 2 speculative false: ACCEPT",
			"node work step 3 speculative true: NEEDS_TOOL",
			"node work step 4 speculative true: COMPLETE",
			"step s in ACCEPT",
			"step s work NEEDS_TOOL",
			"step s work COMPLETE",
			"node out step 5 speculative false: *",
			"step s out *",
			"draft s work released true",
			"run s ended completed, in run",
		}},
	} {
		t.Run(c.out, func(t *testing.T) {
			agent := byNode(map[string][]engine.Reply{
				"in":   {{Decision: "ACCEPT"}},
				"work": {toolReply, {Decision: "COMPLETE", Response: "draft"}},
				"out":  {{Decision: c.out, Response: "judged"}},
			})
			r := &recorder{}
			e := &engine.Engine{Flows: map[string]*flow.Flow{"s": {ID: "s", Def: mustParse(t, def)}},
				Exec: &engine.Executor{Agent: agent, Observe: r.observer()}, Store: &memstore.Store{}, Log: slog.New(slog.DiscardHandler)}
			if err := e.Run(context.Background(), engine.Request{FlowID: "s", Input: "hi"}, func(flow.Event) {}); err != nil {
				t.Fatal(err)
			}
			// The speculative turn runs beside its judge: its iterations
			// are in order among themselves, and the rest among itself.
			apart := func(seen []string) (spec, rest []string) {
				for _, s := range seen {
					if strings.Contains(s, "speculative true") {
						spec = append(spec, s)
					} else {
						rest = append(rest, s)
					}
				}
				return spec, rest
			}
			gotSpec, got := apart(r.seen)
			wantSpec, want := apart(c.want)
			if !slices.Equal(got, want) || !slices.Equal(gotSpec, wantSpec) {
				t.Errorf("observed\n  %q\nwant\n  %q", r.seen, c.want)
			}
			if r.writes < 3 {
				t.Errorf("%d writes observed", r.writes)
			}
		})
	}
}

// A nil observer observes nothing, and a run goes as it did.
func TestNilObserver(t *testing.T) {
	t.Parallel()
	agent := byNode(map[string][]engine.Reply{"in": {reply("BLOCK", "no")}})
	res := runTurn(t, mustParse(t, guarded), agent, nil, "hi")
	if res.out.Status != flow.StatusBlocked {
		t.Errorf("status %s", res.out.Status)
	}
}
