package flow

import (
	"encoding/json"
	"maps"
	"slices"
)

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
	// (docs/experiments.md). They change nothing about the run; run_start shows them.
	Tags map[string]string `json:"tags,omitempty"`
	// Review is the person's answer the run was started for.
	Review *Review `json:"review,omitempty"`
	// Stack is the user constitutions the run's superegos judge under,
	// on top of their own (docs/stacks.md): library names and levels.
	Stack []StackEntry `json:"stack,omitempty"`
	// Client is what a request offers its flow's "client" agent: its own
	// function tools (docs/gateway.md); Results are the client's results for the
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
	// ReadOnly and ClosedWorld decide how its calls are judged (docs/actions.md);
	// a client's tool is neither unless it says so (an experiment's
	// simulated tools may, docs/experiments.md).
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

// ReplayOf runs a recorded run again, counterfactually (docs/experiments.md): the nodes
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

// ReplayCounts say how a replayed run was made: steps reused from the
// record, and model calls made.
type ReplayCounts struct {
	Reused int `json:"reused"`
	Made   int `json:"made"`
}

// Review is a person's answer to a review the instance waits for: a
// supervisor's HUMAN_REVIEW or proposed changes, or a tool call (docs/actions.md).
// The run it starts records it with its options (RunOptions.Review),
// so that a run resumed after a crash still answers it.
type Review struct {
	ReviewID string `json:"review_id,omitempty"`
	Approve  bool   `json:"approve"`
	Note     string `json:"note,omitempty"`
}
