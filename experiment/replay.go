package experiment

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"superego/flow"
)

// ReplayRequest makes a counterfactual condition: what the superegos of
// condition From would have decided with other constitutions or models,
// on the runs From recorded (docs/experiments.md).
type ReplayRequest struct {
	From          string            `json:"from"`
	As            string            `json:"as"`
	Constitutions map[string]string `json:"constitutions,omitempty"` // node → constitution name
	Models        map[string]string `json:"models,omitempty"`        // node → "provider:model"
	// Stack, where given (an empty list too), is the stack the superegos
	// that take one are asked again under, instead of From's (docs/stacks.md);
	// each sample's own constitutions still go on top.
	Stack []flow.Pick `json:"stack,omitempty"`
	// NoLive ends a replay whose path leaves the record "diverged",
	// instead of running the rest live.
	NoLive bool `json:"no_live,omitempty"`
}

// Replay adds a counterfactual condition to a finished experiment, to be
// run by Start. Its outcomes re-judge From's recorded runs: the nodes it
// changes are asked again, on the inputs the path gives them, and every
// other node's recorded step is reused, with no call, while the path is
// the record's.
func (l *Lab) Replay(ctx context.Context, id string, req ReplayRequest) (Planned, error) {
	rec, plan, err := l.load(ctx, id)
	if err != nil {
		return Planned{}, err
	}
	l.mu.Lock()
	running := l.runs[id] != nil
	l.mu.Unlock()
	if running {
		return Planned{}, fmt.Errorf("experiment %s is running: replay it once it has finished: %w", id, flow.ErrBusy)
	}
	bad := func(path, format string, args ...any) error {
		return invalid(flow.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	src, ok := plan.condition(req.From)
	if !ok {
		return Planned{}, bad("from", "no condition %q in experiment %s (its conditions: %v)", req.From, id, names(plan))
	}
	if _, taken := plan.condition(req.As); taken {
		return Planned{}, bad("as", "%q names a condition of the experiment already", req.As)
	}
	if len(req.Constitutions) == 0 && len(req.Models) == 0 && req.Stack == nil {
		return Planned{}, bad("constitutions", "a replay changes a constitution or a model of a node, or the stack: give at least one")
	}
	if p := l.Env.tooMany(len(plan.Samples), len(plan.Conditions)+1, plan.Repeats); p != nil {
		return Planned{}, invalid(*p)
	}
	kept, err := l.slots(ctx, id)
	if err != nil {
		return Planned{}, err
	}
	recorded := 0
	for slot, k := range kept {
		if slot.Condition == src.Name && k.finished {
			recorded++
		}
	}
	if want := len(plan.Samples) * plan.Repeats; recorded < want {
		return Planned{}, bad("from", "condition %q has %d of its %d outcomes recorded: resume the experiment before replaying it", src.Name, recorded, want)
	}
	c := Condition{Name: req.As, Flow: src.Flow, Model: src.Model, Constitutions: maps.Clone(src.Constitutions), Models: maps.Clone(src.Models), Stack: src.Stack}
	ask := map[string]bool{}
	if req.Stack != nil {
		c.Stack = req.Stack
		if f := l.Env.Flows[src.Flow]; f != nil {
			for name, n := range f.Def.Graph.Nodes {
				if n.TakesStack() {
					ask[name] = true
				}
			}
		}
	}
	for node, name := range req.Constitutions {
		if c.Constitutions == nil {
			c.Constitutions = map[string]string{}
		}
		c.Constitutions[node], ask[node] = name, true
	}
	for node, model := range req.Models {
		if c.Models == nil {
			c.Models = map[string]string{}
		}
		c.Models[node], ask[node] = model, true
	}
	planned, problems := c.plan(l.Env)
	if req.Stack != nil {
		problems = append(problems, prefixed("stack", checkStack(l.Env, req.Stack))...)
	}
	if len(problems) > 0 {
		return Planned{}, invalid(problems...)
	}
	planned.Replay = &Replay{From: src.Name, Ask: slices.Sorted(maps.Keys(ask)), NoLive: req.NoLive}
	plan.Conditions = append(plan.Conditions, planned)
	rec.Plan, rec.Status, rec.Report = plan.Encode(), StatusRunning, nil
	if err := l.Store.UpdateExperiment(ctx, rec); err != nil {
		return Planned{}, fmt.Errorf("experiment %s: %w", id, err)
	}
	return planned, nil
}
