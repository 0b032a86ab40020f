package engine_test

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"superego/engine"
	"superego/flow"
	"superego/memstore"
	"superego/sqlite"
)

var library = flow.Library{"vegan": "V text", "child_safe": "C text", "medical_caution": "M text", "Odd Name": "never in a stack"}

const stackedFlow = `{"name": "g", "graph": {"start": "in", "nodes": {
  "in": {"type": "superego", "agent_id": "in", "constitution": "floor of in", "transitions": {"ACCEPT": "work", "BLOCK": null}},
  "work": {"type": "inner_agent", "agent_id": "work", "transitions": {"COMPLETE": "out"}},
  "out": {"type": "superego", "agent_id": "out", "constitution": "floor of out", "stack": "off", "transitions": {"ACCEPT": null, "BLOCK": null}}}}}`

// The run's stack reaches its superegos, and only those that take it: an
// inner agent never gets one, a superego with "stack": "off" judges on its
// own constitution. Each stacked step records the stack, the floor first,
// and what its judge said it rests on: "floor", a name of the stack, or
// "other"; nothing where it said nothing. The observer counts the bases.
func TestStackReachesTheSuperegosThatTakeIt(t *testing.T) {
	t.Parallel()
	stack := []flow.StackEntry{{Name: "vegan", Adherence: 4}, {Name: "child_safe", Adherence: 2}}
	cases := []struct {
		said, basis string
	}{
		{" Vegan ", "vegan"},
		{"floor", "floor"},
		{"the user's wishes", "other"},
		{"", ""},
	}
	for _, c := range cases {
		t.Run(c.said, func(t *testing.T) {
			var mu sync.Mutex
			stacks := map[string][]flow.Layer{}
			agent := agentFunc(func(task *engine.Task) (engine.Reply, error) {
				mu.Lock()
				stacks[task.Node.Name] = task.Stack
				mu.Unlock()
				r := reply("ACCEPT", "")
				if task.Node.Name == "work" {
					r = reply("COMPLETE", "done")
				}
				r.Basis = c.said // every node says it: only a stacked judge's counts
				return r, nil
			})
			var bases []string
			obs := &engine.Observer{Based: func(flowID, node, basis string) { bases = append(bases, node+"="+basis) }}
			var steps []flow.Step
			out := (&engine.Executor{Agent: agent, Observe: obs, Library: library}).Execute(context.Background(),
				engine.Turn{FlowID: "g", Def: mustParse(t, stackedFlow), InstanceID: "i", RunID: "r", Input: "lunch ideas?", Options: flow.RunOptions{Stack: stack}},
				engine.Sink{Emit: func(evs ...flow.Event) error {
					for _, e := range evs {
						if s, ok := e.Data.(*flow.Step); ok {
							steps = append(steps, *s)
						}
					}
					return nil
				}})
			if out.Status != flow.StatusCompleted {
				t.Fatalf("run: %+v", out)
			}
			if want := []flow.Layer{{Name: "vegan", Adherence: 4, Text: "V text"}, {Name: "child_safe", Adherence: 2, Text: "C text"}}; !reflect.DeepEqual(stacks["in"], want) || stacks["work"] != nil || stacks["out"] != nil {
				t.Errorf("tasks' stacks: %+v", stacks)
			}
			wantStack := []flow.StackEntry{{Name: "floor"}, {Name: "vegan", Adherence: 4}, {Name: "child_safe", Adherence: 2}}
			for _, s := range steps {
				switch s.Node {
				case "in":
					if !reflect.DeepEqual(s.Stack, wantStack) || s.Basis != c.basis || s.Constitution != "floor of in" {
						t.Errorf("the stacked judge's step: stack %+v, basis %q, constitution %q", s.Stack, s.Basis, s.Constitution)
					}
				default:
					if s.Stack != nil || s.Basis != "" {
						t.Errorf("%s's step: stack %+v, basis %q", s.Node, s.Stack, s.Basis)
					}
				}
			}
			var want []string
			if c.basis != "" {
				want = []string{"in=" + c.basis}
			}
			if !slices.Equal(bases, want) {
				t.Errorf("bases counted %v, want %v", bases, want)
			}
		})
	}
}

// A run's stack is recorded with its options, names and levels: a run
// resumed after a crash, on a store that kept only its log, judges under
// the stack it started with, its texts read from the library as the
// flow's own constitutions are; a run whose stack names a constitution the
// library no longer has ends failed, saying which.
func TestAResumedRunJudgesUnderItsStack(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(t *testing.T) flow.Store{
		"memory": func(*testing.T) flow.Store { return &memstore.Store{} },
		"sqlite": func(t *testing.T) flow.Store {
			s, err := sqlite.Open(t.TempDir() + "/s.db")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			first := "s"
			store := open(t)
			errs := make(chan error, 4) // the creates' and the appends' reports, read below
			for id, stack := range map[string][]flow.StackEntry{"i1": {{Name: "vegan", Adherence: 4}}, "gone": {{Name: "vegetarian", Adherence: 2}}} {
				store.Create(flow.Instance{ID: id, FlowID: "one"}, func(err error) { errs <- err })
				store.Append(id, []flow.Event{
					{ID: 1, Name: flow.EventRunStart, Data: flow.RunStart{InstanceID: id, RunID: "r1", FlowID: "one", RunOptions: flow.RunOptions{Stack: stack}}},
					{ID: 2, Name: flow.EventCompleteStep, Data: &flow.Step{StepID: "1", AgentID: "user", Role: flow.RoleUser, Response: "hi", NextAgent: &first}},
				}, func(err error) { errs <- err })
			}
			for range 4 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			var got []flow.Layer
			agent := agentFunc(func(task *engine.Task) (engine.Reply, error) {
				got = task.Stack
				r := reply("ACCEPT", "")
				r.Basis = "floor"
				return r, nil
			})
			e := newEngine(t, agent, 0)
			e.Store, e.Exec.Library = store, library
			if n, err := e.Recover(ctx, nil); n != 2 || err != nil {
				t.Fatalf("recover: %d, %v", n, err)
			}
			events := drain(mustSubscribe(t, e, "i1"))
			if want := []flow.Layer{{Name: "vegan", Adherence: 4, Text: "V text"}}; !reflect.DeepEqual(got, want) {
				t.Errorf("the resumed judge's stack: %+v, want %+v", got, want)
			}
			var step flow.Step
			for _, ev := range events {
				if s, ok := ev.Data.(*flow.Step); ok && s.Node == "s" {
					step = *s
				}
				if rs, ok := ev.Data.(flow.RunStart); ok && rs.Resumed && !reflect.DeepEqual(rs.Stack, []flow.StackEntry{{Name: "vegan", Adherence: 4}}) {
					t.Errorf("the resumed run's run_start: %+v", rs.RunOptions)
				}
			}
			b, _ := json.Marshal(step)
			if !strings.Contains(string(b), `"stack":[{"name":"floor"},{"name":"vegan","adherence":4}],"basis":"floor"`) {
				t.Errorf("the resumed judge's step: %s", b)
			}
			gone := drain(mustSubscribe(t, e, "gone"))
			var failed string
			for _, ev := range gone {
				if d, ok := ev.Data.(flow.ErrorData); ok {
					failed = d.Message
				}
			}
			if d, _ := gone[len(gone)-1].Data.(flow.Done); d.Status != flow.StatusFailed ||
				!strings.Contains(failed, `the run's stack names constitution "vegetarian", which the constitution library does not have`) {
				t.Errorf("a run whose constitution left the library: %q, %+v", failed, gone[len(gone)-1])
			}
		})
	}
}
