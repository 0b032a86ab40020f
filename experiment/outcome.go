package experiment

import (
	"bytes"
	"cmp"
	"encoding/json"
	"strconv"

	"superego/flow"
)

// Slot is one outcome's place in an experiment: a sample, by its label and
// id, through a condition, in a repeat.
type Slot struct {
	Condition string
	Label     string
	SampleID  string
	Repeat    int
}

// Outcome is how one sample fared through one condition in one repeat,
// from what a client of its instance may see: a line of results.jsonl.
// It holds no hidden field: a withheld draft is not its response, an
// agent's guidance or thinking is in no field.
type Outcome struct {
	ExperimentID string `json:"experiment_id"`
	Condition    string `json:"condition"`
	SampleID     string `json:"sample_id"`
	Repeat       int    `json:"repeat"`
	Label        string `json:"label"`
	Category     string `json:"category"`
	InstanceID   string `json:"instance_id"`
	Status       string `json:"status"`
	Refused      bool   `json:"refused"`
	// RefusedBy is "superego:NODE" when a superego's BLOCK ended the run or
	// its judgement withheld the final answer, "agent" when the final
	// answer is itself a refusal as the refusal judge says; nil otherwise.
	RefusedBy *string           `json:"refused_by"`
	Decisions map[string]string `json:"decisions"`  // node → its last decision of the run
	Response  string            `json:"response"`   // the final visible response
	Tokens    map[string]Tokens `json:"tokens"`     // node → tokens of its calls
	LatencyMS map[string]int64  `json:"latency_ms"` // node → time in its calls
	// Models are the models the run's calls went to (docs/experiments.md), by node.
	Models map[string]NodeModel `json:"models,omitempty"`
	// CachedTokens and SharedTokens are those of Tokens whose replies came
	// from the reply cache, or from the same call in flight for another
	// run: node → tokens; a node with none is absent.
	CachedTokens map[string]Tokens `json:"cached_tokens,omitempty"`
	SharedTokens map[string]Tokens `json:"shared_tokens,omitempty"`
	Error        *flow.ErrorData   `json:"error"`
	// DecidingNode is the node whose decision ended the run: the superego
	// that refused, or the last node to run.
	DecidingNode string `json:"deciding_node"`
	WallMS       int64  `json:"wall_ms"` // from run_start to done
	ModelCalls   Calls  `json:"model_calls"`
	// What an agentic sample's agent did (docs/experiments.md): every call it asked
	// for, in order (an empty list where it asked for none, in every
	// outcome), and whether its actions harmed, did the user's task, or
	// did the attacker's; nil where the sample says nothing of it.
	ToolCalls          []ToolCall `json:"calls"`
	Harmed             *bool      `json:"harmed,omitempty"`
	CompletedTask      *bool      `json:"completed_task,omitempty"`
	UtilityUnderAttack *bool      `json:"utility_under_attack,omitempty"`
	Attacked           *bool      `json:"attacked,omitempty"`
	// HeuristicRefused is what the built-in heuristic says of the final
	// answer where a model (refusal_judge.model) judged it: the report's
	// agreement of the two.
	HeuristicRefused *bool `json:"heuristic_refused,omitempty"`
	// SpeculativeTokens are those of speculative calls the run discarded
	// (docs/gating.md), in no node's count.
	SpeculativeTokens *Tokens `json:"speculative_tokens,omitempty"`
	// Bases are what the run's stacked superegos said their last
	// decisions rest on (docs/stacks.md): node → "floor", a constitution's name
	// or "other"; absent for a node that said nothing.
	Bases map[string]string `json:"bases,omitempty"`
}

// UnmarshalJSON reads an outcome as any version of the server stored it:
// before agentic samples (docs/experiments.md) took "calls" for the calls an agent
// asked for, it held the counts "model_calls" holds now, and experiments
// recorded then still report.
func (o *Outcome) UnmarshalJSON(b []byte) error {
	type stored Outcome // its fields, without this method
	var v struct {
		*stored
		Calls json.RawMessage `json:"calls"`
	}
	v.stored = (*stored)(o)
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch c := bytes.TrimSpace(v.Calls); {
	case len(c) > 0 && c[0] == '{':
		return json.Unmarshal(c, &o.ModelCalls)
	case len(c) > 0:
		return json.Unmarshal(c, &o.ToolCalls)
	}
	return nil
}

// MarshalJSON writes calls as a list in every outcome, empty where the
// agent asked for none (or its sample had no tools): a dataframe of
// results.jsonl gets a list in every row, never a missing column.
func (o Outcome) MarshalJSON() ([]byte, error) {
	type stored Outcome // its fields, without this method
	if o.ToolCalls == nil {
		o.ToolCalls = []ToolCall{}
	}
	return json.Marshal(stored(o))
}

// Tokens are a count of prompt and completion tokens.
type Tokens struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
}

// NodeModel is the model of a node's calls in a run: as the node asked
// for it ("openai:gpt-4o-mini"), as the provider named it in its replies,
// where it did, and the sampling parameters the calls sent (those of its
// last call).
type NodeModel struct {
	Model       string           `json:"model"`
	ServedModel string           `json:"served_model,omitempty"`
	Parameters  *flow.Parameters `json:"parameters,omitempty"`
}

// Calls count an outcome's model calls: those made, the replies taken
// from the reply cache (or shared with the same call in flight for
// another outcome), and the steps a replay reused from the run it
// replays, with no call. The refusal judge's calls are among those made
// or cached, and counted in Judge too.
type Calls struct {
	Made   int `json:"made"`
	Cached int `json:"cached"`
	Reused int `json:"reused"`
	Judge  int `json:"judge"`
}

func (c *Calls) add(o Calls) {
	c.Made += o.Made
	c.Cached += o.Cached
	c.Reused += o.Reused
	c.Judge += o.Judge
}

// Refusers of refused_by.
const refusedByAgent = "agent"

func bySuperego(node string) *string {
	s := "superego:" + node
	return &s
}

// Counted apart: an outcome whose run failed (a provider error, a
// timeout) is neither a refusal nor a compliance, nor is a replay that
// left its record with --no-live.
func (o *Outcome) apart() bool {
	return o.Status == flow.StatusFailed || o.Status == flow.StatusDiverged || o.Error != nil
}

// observe derives an outcome from the events of its instance's run (or
// runs, where a crash interrupted one): its steps after the user's, and
// the last done. ok is false while the run has not ended. Whether the
// final answer is the agent's own refusal is for the refusal judge, after.
// def is the flow's definition, which says which nodes are superegos.
func observe(events []flow.Event, def *flow.Definition) (o Outcome, ok bool) {
	superego := func(node string) bool {
		n := def.Graph.Nodes[node]
		return n != nil && n.Type == flow.Superego
	}
	o.Decisions, o.Tokens, o.LatencyMS = map[string]string{}, map[string]Tokens{}, map[string]int64{}
	var steps []flow.Step
	var done *flow.Done
	var started, ended int64
	for _, ev := range events {
		switch d := ev.Data.(type) {
		case flow.RunStart:
			o.InstanceID = d.InstanceID
			if started == 0 {
				started = ev.Time.UnixMilli()
			}
		case *flow.Step:
			if d.Role == flow.RoleUser {
				steps = steps[:0] // the turn starts here
				continue
			}
			steps = append(steps, *d)
		case flow.ErrorData:
			o.Error = &d
		case flow.Done:
			done, ended = &d, ev.Time.UnixMilli()
		}
	}
	if done == nil {
		return o, false
	}
	o.Status, o.Response = done.Status, done.Response
	if started > 0 {
		o.WallMS = max(0, ended-started)
	}
	if u := done.Usage; u != nil && (u.SpeculativePromptTokens > 0 || u.SpeculativeCompletionTokens > 0) {
		o.SpeculativeTokens = &Tokens{u.SpeculativePromptTokens, u.SpeculativeCompletionTokens}
	}
	lastInner := -1
	for i, s := range steps {
		if s.Node == "" {
			continue
		}
		o.Decisions[s.Node] = s.Decision
		if s.Basis != "" {
			if o.Bases == nil {
				o.Bases = map[string]string{}
			}
			o.Bases[s.Node] = s.Basis
		} else {
			delete(o.Bases, s.Node)
		}
		if s.Usage != nil {
			addTokens(o.Tokens, s.Node, *s.Usage)
			switch {
			case s.Cached && s.Shared:
				o.SharedTokens = addTokens(o.SharedTokens, s.Node, *s.Usage)
			case s.Cached:
				o.CachedTokens = addTokens(o.CachedTokens, s.Node, *s.Usage)
			}
		}
		if s.Model != "" {
			if o.Models == nil {
				o.Models = map[string]NodeModel{}
			}
			m := o.Models[s.Node]
			m.Model, m.ServedModel, m.Parameters = s.Model, cmp.Or(s.ServedModel, m.ServedModel), cmp.Or(s.Parameters, m.Parameters)
			o.Models[s.Node] = m
		}
		o.LatencyMS[s.Node] += int64(s.LatencyMS)
		switch {
		case s.Reused:
			o.ModelCalls.Reused++
		case s.Model == "":
		case s.Cached:
			o.ModelCalls.Cached++
		default:
			o.ModelCalls.Made++
		}
		if !superego(s.Node) {
			lastInner = i
		}
		o.DecidingNode = s.Node
	}
	if o.Status != flow.StatusFailed {
		o.Error = nil // an error event of an earlier, interrupted run
	}
	o.ToolCalls = callsOf(steps)
	switch {
	case o.Status == flow.StatusBlocked:
		// A superego's BLOCK (or a human's rejection of what a supervisor
		// sent for review) ended the run.
		o.Refused, o.RefusedBy = true, bySuperego(o.DecidingNode)
		if last := steps[len(steps)-1]; last.Judged != nil { // a judge of actions whose BLOCK ends the run
			by := last.Judged.Kind + "_judge:" + last.Node
			if last.Judged.Kind == flow.KindCall {
				by = "tool_judge:" + last.Node
			}
			o.RefusedBy = &by
		}
	case (o.Status == flow.StatusCompleted || o.Status == flow.StatusIterationLimit) && lastInner >= 0 &&
		steps[lastInner].Withheld != "" && decided(steps[lastInner+1:], steps[lastInner].Withheld):
		// The final answer did not pass its judge, and nothing replaced it.
		node := steps[lastInner].Withheld
		o.Refused, o.RefusedBy, o.DecidingNode = true, bySuperego(node), node
	}
	return o, true
}

// addTokens adds u to node's tokens in m, made if nil.
func addTokens(m map[string]Tokens, node string, u flow.Usage) map[string]Tokens {
	if m == nil {
		m = map[string]Tokens{}
	}
	t := m[node]
	t.Prompt += u.PromptTokens
	t.Completion += u.CompletionTokens
	m[node] = t
	return m
}

// decided reports whether node made a decision among steps: a draft
// withheld because a run ended before its judgement names a judge that
// never saw it.
func decided(steps []flow.Step, node string) bool {
	for _, s := range steps {
		if s.Node == node && s.Decision != "" && s.Decision != flow.NeedsTool {
			return true
		}
	}
	return false
}

// judgeable reports whether the refusal judge is asked about the outcome:
// it ended with an answer no superego refused. A clarifying question, a
// review pending, a failure, are not answers.
func (o *Outcome) judgeable() bool {
	return !o.Refused && o.Response != "" && (o.Status == flow.StatusCompleted || o.Status == flow.StatusIterationLimit)
}

// tags are what an experiment's run says it is part of (RunOptions.Tags).
func tags(experiment string, s Slot) map[string]string {
	return map[string]string{"experiment": experiment, "condition": s.Condition, "label": s.Label, "sample": s.SampleID, "repeat": strconv.Itoa(s.Repeat)}
}
