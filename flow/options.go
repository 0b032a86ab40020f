package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Request is a run to start.
type Request struct {
	FlowID     string
	InstanceID string // "" for a new instance
	Input      string
	// Prior, for a new instance, is its conversation before Input: user
	// and assistant messages, as a client that keeps the conversation sends
	// it whole with each message (OpenAI's chat completions). They become
	// the instance's first steps, written with the run's start, and its
	// nodes' models read them as the transcript.
	Prior   []Step
	Options RunOptions
	// Continue goes on with the instance's turn, with no new message: its
	// client's tool results (Options.Results) are in, or it is abandoned
	// (Options.Abandon). Input is unused.
	Continue bool
}

// RunOptions are how a run differs from a plain run of its flow. Its
// run_start records them, so that a run resumed after a crash goes on the
// same way.
type RunOptions struct {
	Variant *Variant `json:"variant,omitempty"`
	// Cache, where set, lets the agents reuse model replies recorded under
	// it: runs of an experiment's repeat share one, so that running it again
	// costs no model call.
	Cache  string    `json:"cache,omitempty"`
	Replay *ReplayOf `json:"replay,omitempty"`
	// Tags say what the run is part of, for whoever started it: an
	// experiment's runs name the experiment, condition, sample and repeat
	// (SPEC §7). They change nothing about the run; run_start shows them.
	Tags map[string]string `json:"tags,omitempty"`
	// Review is the person's answer the run was started for.
	Review *Review `json:"review,omitempty"`
	// Stack is the user constitutions the run's superegos judge under,
	// on top of their own (SPEC §10): library names and levels.
	Stack []StackEntry `json:"stack,omitempty"`
	// Client is what a request offers its flow's "client" agent: its own
	// function tools (SPEC §4a); Results are the client's results for the
	// calls the instance waits for; Abandon, instead, ends the wait, each
	// call answered "not run: " and it.
	Client  *ClientTools   `json:"client,omitempty"`
	Results []ClientResult `json:"results,omitempty"`
	Abandon string         `json:"abandon,omitempty"`
	// Owner is a hash of the API key that started the instance: its calls'
	// results are taken from that key only.
	Owner string `json:"owner,omitempty"`
}

// ClientTools are a request's function tools, offered to the flow's
// "client" agent, with OpenAI's tool_choice and parallel_tool_calls.
// Where the request came through a model API (Chat Completions, Responses,
// Messages), Wire names the protocol and Body is the request as the
// client sent it, its whole conversation resolved: the agent's model is
// sent that request, not the flow's transcript, so that it is the agent
// the client's developer built.
type ClientTools struct {
	Tools    []ClientTool    `json:"tools"`
	Choice   json.RawMessage `json:"tool_choice,omitempty"`
	Parallel *bool           `json:"parallel_tool_calls,omitempty"`
	Wire     string          `json:"wire,omitempty"`
	Body     json.RawMessage `json:"body,omitempty"`
	// Header is the request's headers an upstream of the same protocol is
	// sent too: Anthropic's anthropic-beta and anthropic-version.
	Header map[string]string `json:"header,omitempty"`
}

// ClientInstructions is the agent id of a new instance's first step where
// a model API's client gave its agent instructions: a judge reads them as
// the client's, untrusted context, never as instructions to itself.
const ClientInstructions = "client_instructions"

// ClientTool is one of a client's function tools.
type ClientTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	// ReadOnly and ClosedWorld decide how its calls are judged (SPEC
	// §3c); a client's tool is neither unless it says so (an experiment's
	// simulated tools may, SPEC §7a).
	ReadOnly    bool `json:"read_only,omitempty"`
	ClosedWorld bool `json:"closed_world,omitempty"`
}

// ClientResult is a client's result for a call it was sent.
type ClientResult struct {
	ToolCallID string `json:"tool_call_id"`
	Output     string `json:"output"`
}

// Variant changes a flow for one run: other constitutions or models for
// some of its nodes, as an experiment's condition does.
type Variant struct {
	Constitutions map[string]string `json:"constitutions,omitempty"` // node → constitution text
	Models        map[string]string `json:"models,omitempty"`        // node → model
	Model         string            `json:"model,omitempty"`         // the model of every node Models does not name
}

// ReplayOf runs a recorded run again, counterfactually (SPEC §7): the nodes
// in Ask are asked again, on the inputs the path gives them; every other
// node's recorded step is reused, with no call, for as long as the path is
// the one recorded. Where a node asked again decides otherwise, the path
// leaves the record: the rest runs live, or with NoLive the run ends
// diverged.
type ReplayOf struct {
	Instance string   `json:"instance"` // whose last turn is replayed
	Ask      []string `json:"ask"`
	NoLive   bool     `json:"no_live,omitempty"`
}

// StatusDiverged ends a replay with NoLive whose path left the record.
const StatusDiverged = "diverged"

// With is the definition with a variant's changes. Its nodes are copies;
// the definition itself is unchanged.
func (d *Definition) With(v *Variant) (*Definition, error) {
	if v == nil {
		return d, nil
	}
	var problems []Problem
	for _, node := range slices.Sorted(maps.Keys(v.Constitutions)) {
		if n := d.Graph.Nodes[node]; n == nil || n.Type != Superego {
			problems = append(problems, Problem{"constitutions." + node, "not a superego node of the flow"})
		}
	}
	for _, node := range slices.Sorted(maps.Keys(v.Models)) {
		if d.Graph.Nodes[node] == nil {
			problems = append(problems, Problem{"models." + node, "not a node of the flow"})
		}
	}
	if len(problems) > 0 {
		return nil, &InvalidError{problems}
	}
	out := *d
	out.Graph.Nodes = make(map[string]*Node, len(d.Graph.Nodes))
	for name, n := range d.Graph.Nodes {
		c := *n
		if text, ok := v.Constitutions[name]; ok {
			c.Constitution = text
		}
		if m, ok := v.Models[name]; ok {
			c.Model = m
		} else if v.Model != "" {
			c.Model = v.Model
		}
		out.Graph.Nodes[name] = &c
	}
	return &out, nil
}

// variants keeps one definition per flow and variant: a run's nodes are
// the same pointers as every other run's of that condition, and whatever
// is cached by node stays bounded.
type variants struct {
	mu   sync.Mutex
	defs map[string]*Definition
}

func (vs *variants) of(f *Flow, v *Variant) (*Definition, error) {
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
		vs.defs = map[string]*Definition{}
	}
	vs.defs[k] = d
	return d, nil
}

// recorded is the turn a replay replays: the steps of the instance's last
// turn after its user's, with what they withheld put back, as they were
// made.
func recorded(ctx context.Context, store Store, id string) ([]Step, error) {
	events, err := store.Events(ctx, id, 0)
	if err != nil {
		return nil, fmt.Errorf("replay %s: %w", id, err)
	}
	steps := Replay(events).Steps
	turn := lastUserStep(steps)
	if turn < 0 {
		return nil, fmt.Errorf("replay %s: the instance has no turn to replay: %w", id, ErrInvalid)
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
	steps    []Step // the nodes' steps; judgements of actions are apart
	next     int
	ask      map[string]bool
	noLive   bool
	diverged bool
	counts   ReplayCounts
	// judgements are the record's judgements of actions, by what they
	// judged, each taken once, where the replay comes to the step of the
	// call it judged; ids are the record's ids of those taken, mapped to
	// the replay's.
	judgements map[judgedKey][]Step
	ids        map[string]string
}

// judgedKey is what a judgement of an action judged: a call of an agent's
// node, or its result.
type judgedKey struct{ node, call, kind string }

// ReplayCounts say how a replayed run was made: steps reused from the
// record, and model calls made.
type ReplayCounts struct {
	Reused int `json:"reused"`
	Made   int `json:"made"`
}

func newReplayer(steps []Step, r *ReplayOf) *replayer {
	ask := map[string]bool{}
	for _, n := range r.Ask {
		ask[strings.TrimSpace(n)] = true
	}
	// A judgement of an action is part of its agent's step, which is
	// reused or asked again with it: the walk is over the nodes' steps.
	p := &replayer{ask: ask, noLive: r.NoLive, judgements: map[judgedKey][]Step{}, ids: map[string]string{}}
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
func (p *replayer) judgement(node, call, kind string) (s Step, ok bool) {
	k := judgedKey{node, call, kind}
	list := p.judgements[k]
	if len(list) == 0 {
		return Step{}, false
	}
	p.judgements[k] = list[1:]
	return list[0], true
}

// at says what the replay does at node: reuse the recorded step, or ask
// the node; ok is false when the path has left the record here and the
// run may not go on live.
func (p *replayer) at(node string) (reuse *Step, ok bool) {
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
func (p *replayer) walked(s Step) {
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
func (p *replayer) took(s Step) {
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
func (p *replayer) asked(step *Step) (ok bool) {
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
