//go:build unix

package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"superego/engine"
	"superego/flow"
)

// ruledFlow is an agent whose calls would go to its tool judge, were it not
// for a rule that allows them.
const ruledFlow = `{"name": "ruled", "graph": {"start": "a", "nodes": {
  "a": {"type": "inner_agent", "agent_id": "a", "tools": ["write_file"], "tool_judge": "j",
    "permissions": {"allow": ["write_file(path=notes/**)"], "deny": ["write_file(path=**/.env)"]},
    "transitions": {"COMPLETE": null, "NEEDS_TOOL": "self"}},
  "j": {"type": "superego", "agent_id": "j", "constitution": "c"}}}}`

// BenchmarkRuledCalls is the cost of permissions deciding without a model
// (docs/actions.md: "rules cost no model call"): one turn in which the agent
// proposes n calls that change things, each decided by an allow rule (after
// the deny rule did not match), run as a no-op and recorded, then answers.
// ns/call is the whole turn's time, both iterations and every event encoded
// as a client would receive it, over its calls; cpu-ns/call the CPU time
// the process spent on them (user and system, GC included), which other
// work on a shared machine does not inflate as it does the wall time.
// (unix only, for getrusage.)
func BenchmarkRuledCalls(b *testing.B) {
	def, err := flow.Parse([]byte(ruledFlow), flow.Catalog{Tools: []string{"write_file"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decide", func(b *testing.B) {
		// The rules alone, on one call's arguments.
		p := def.Graph.Nodes["a"].Permissions
		input := json.RawMessage(`{"path": "notes/day 1.md", "content": "what was done"}`)
		b.ReportAllocs()
		runs, cpu0 := 0, cpuTime(b)
		for b.Loop() {
			runs++
			_, args, err := flow.DecodeArguments(input, nil)
			if r := p.Decide("write_file", args); err != nil || r.Effect != flow.EffectAllow {
				b.Fatal(r)
			}
		}
		b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(runs), "cpu-ns/call")
	})
	for _, n := range []int{1, 3, 30} {
		b.Run(fmt.Sprintf("calls=%d", n), func(b *testing.B) {
			uses := make([]flow.ToolUse, n)
			for i := range uses {
				uses[i] = flow.ToolUse{ID: fmt.Sprintf("c%d", i), ToolName: "write_file",
					Input: json.RawMessage(fmt.Sprintf(`{"path": "notes/day %d.md", "content": "what was done"}`, i))}
			}
			ran := 0
			noop := func(context.Context, json.RawMessage) engine.Result { ran++; return engine.Result{Output: "written"} }
			var last []flow.ToolUse
			agent := agentFunc(func(t *engine.Task) (engine.Reply, error) {
				if t.Node.Name != "a" {
					return engine.Reply{}, errors.New("the judge was asked")
				}
				if len(t.ToolRounds) > 0 {
					return reply(flow.Complete, "done"), nil
				}
				for i, u := range uses {
					t.Calls.Propose(i, u, engine.ToolInfo{}, noop)
				}
				got, err := t.Calls.Finish(context.Background(), n)
				last = got
				return engine.Reply{ToolUsage: got}, err
			})
			x := &engine.Executor{Agent: agent}
			sink := engine.Sink{Emit: func(evs ...flow.Event) error {
				for _, e := range evs {
					if _, err := json.Marshal(e.Data); err != nil {
						return err
					}
				}
				return nil
			}, Sync: func() error { return nil }}
			b.ReportAllocs()
			runs := 0
			cpu0 := cpuTime(b)
			for b.Loop() {
				runs++
				if out := x.Execute(context.Background(), engine.Turn{FlowID: "ruled", Def: def, InstanceID: "i", RunID: "r", Input: "Write today's notes."}, sink); out.Status != flow.StatusCompleted {
					b.Fatal(out)
				}
			}
			cpu := cpuTime(b) - cpu0
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(runs*n), "ns/call")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(runs*n), "cpu-ns/call")
			if ran != runs*n {
				b.Fatalf("%d calls ran in %d turns of %d", ran, runs, n)
			}
			for _, u := range last {
				if u.Refused || u.JudgedBy == nil || u.JudgedBy.Rule != "allow: write_file(path=notes/**)" {
					b.Fatalf("a call was not decided by the allow rule: %+v", u)
				}
			}
		})
	}
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(tb testing.TB) time.Duration {
	tb.Helper()
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
