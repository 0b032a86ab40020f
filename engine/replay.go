package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"superego/flow"
)

// variants keeps one definition per flow and variant: a run's nodes are
// the same pointers as every other run's of that condition, and whatever
// is cached by node stays bounded.
type variants struct {
	mu   sync.Mutex
	defs map[string]*flow.Definition
}

func (vs *variants) of(f *flow.Flow, v *flow.Variant) (*flow.Definition, error) {
	if v == nil {
		return f.Def, nil
	}
	key, _ := json.Marshal(v) // maps encode sorted: equal variants have equal keys
	k := f.ID + "\x00" + string(key)
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if d := vs.defs[k]; d != nil {
		return d, nil
	}
	d, err := f.Def.With(v)
	if err != nil {
		return nil, fmt.Errorf("flow %q: %w", f.ID, err)
	}
	if vs.defs == nil {
		vs.defs = map[string]*flow.Definition{}
	}
	vs.defs[k] = d
	return d, nil
}

// recorded is the turn a replay replays: the steps of the instance's last
// turn after its user's, with what they withheld put back, as they were
// made.
func recorded(ctx context.Context, store flow.Store, id string) ([]flow.Step, error) {
	events, err := store.Events(ctx, id, 0)
	if err != nil {
		return nil, fmt.Errorf("replay %s: %w", id, err)
	}
	steps := flow.Replay(events).Steps
	turn := lastUserStep(logOf(steps, 0))
	if turn < 0 {
		return nil, fmt.Errorf("replay %s: the instance has no turn to replay: %w", id, flow.ErrInvalid)
	}
	out := slices.Clone(steps[turn+1:])
	for i := range out {
		if out[i].Withheld != "" {
			out[i].Response, out[i].ToolUsage, out[i].Withheld = out[i].WithheldResponse, out[i].WithheldToolUsage, ""
		}
	}
	return out, nil
}

// replayer walks a recorded turn beside the run that replays it.
type replayer struct {
	steps    []flow.Step // the nodes' steps; judgements of actions are apart
	next     int
	ask      map[string]bool
	noLive   bool
	diverged bool
	counts   flow.ReplayCounts
	// judgements are the record's judgements of actions, by what they
	// judged, each taken once, where the replay comes to the step of the
	// call it judged; ids are the record's ids of those taken, mapped to
	// the replay's.
	judgements map[judgedKey][]flow.Step
	ids        map[string]string
}

// judgedKey is what a judgement of an action judged: a call of an agent's
// node, or its result.
type judgedKey struct{ node, call, kind string }

func newReplayer(steps []flow.Step, r *flow.ReplayOf) *replayer {
	ask := map[string]bool{}
	for _, n := range r.Ask {
		ask[strings.TrimSpace(n)] = true
	}
	// A judgement of an action is part of its agent's step, which is
	// reused or asked again with it: the walk is over the nodes' steps.
	p := &replayer{ask: ask, noLive: r.NoLive, judgements: map[judgedKey][]flow.Step{}, ids: map[string]string{}}
	for _, s := range steps {
		if j := s.Judged; j != nil {
			k := judgedKey{j.Node, j.ToolCallID, j.Kind}
			p.judgements[k] = append(p.judgements[k], s)
			continue
		}
		p.steps = append(p.steps, s)
	}
	return p
}

// judgement takes the record's judgement of a call of node, or of its
// result: ok is false where there is none left, because no judge was
// asked, or because the replay took it at an earlier step of the call.
func (p *replayer) judgement(node, call, kind string) (s flow.Step, ok bool) {
	k := judgedKey{node, call, kind}
	list := p.judgements[k]
	if len(list) == 0 {
		return flow.Step{}, false
	}
	p.judgements[k] = list[1:]
	return list[0], true
}

// at says what the replay does at node: reuse the recorded step, or ask
// the node; ok is false when the path has left the record here and the
// run may not go on live.
func (p *replayer) at(node string) (reuse *flow.Step, ok bool) {
	if p.diverged {
		return nil, !p.noLive
	}
	if p.next >= len(p.steps) || p.steps[p.next].Node != node {
		p.diverged = true
		return nil, !p.noLive
	}
	if p.ask[node] {
		return nil, true
	}
	s := p.steps[p.next]
	p.next++
	p.counts.Reused++
	return &s, true
}

// walked takes a step the run made before it was interrupted, as at and
// asked would have.
func (p *replayer) walked(s flow.Step) {
	if s.Reused {
		p.next++
		p.counts.Reused++
		p.took(s)
		return
	}
	if !p.diverged && (p.next >= len(p.steps) || p.steps[p.next].Node != s.Node) {
		p.diverged = true
	}
	p.asked(&s)
}

// took takes the record's judgements of the calls of s, a step the replay
// reused before it was interrupted, as rejudge took them: s's calls name
// the replay's judgements.
func (p *replayer) took(s flow.Step) {
	for _, u := range s.ToolUsage {
		for _, j := range judgementsOf(u) {
			if j.by == nil || j.by.Node == "" {
				continue
			}
			if was, ok := p.judgement(s.Node, u.ID, j.kind); ok {
				p.ids[was.StepID] = j.by.StepID
			}
		}
	}
}

// asked takes the step of a node asked again: the path stays on the record
// while it decides as recorded. ok is false when it left the record and
// the run may not go on live.
func (p *replayer) asked(step *flow.Step) (ok bool) {
	p.counts.Made++
	if p.diverged {
		return true
	}
	rec := &p.steps[p.next]
	if step.Decision != rec.Decision || (step.NextAgent == nil) != (rec.NextAgent == nil) || step.NextAgent != nil && *step.NextAgent != *rec.NextAgent {
		p.diverged = true
		return !p.noLive
	}
	p.next++
	return true
}
