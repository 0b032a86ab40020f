package flow

import (
	"encoding/json"
	"math"
	"time"
)

// Roles of a step.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleSystem    = "system"
)

// Statuses of an instance: how its last run ended, or Running.
const (
	StatusRunning        = "running"
	StatusCompleted      = "completed"
	StatusBlocked        = "blocked"
	StatusAwaitingInput  = "awaiting_input"
	StatusAwaitingReview = "awaiting_review"
	// StatusAwaitingToolResult: a client's tool calls went out, and the
	// instance waits for their results (docs/gateway.md).
	StatusAwaitingToolResult = "awaiting_tool_result"
	StatusIterationLimit     = "iteration_limit"
	StatusFailed             = "failed"
	StatusCancelled          = "cancelled"
	StatusNew                = "new" // created, never run
)

// Step is one immutable record of an instance's log. Thinking and
// AgentGuidance have no JSON encoding: they reach the next node's model
// through Task, and a client never.
type Step struct {
	StepID       string    `json:"step_id"`
	AgentID      string    `json:"agent_id"`
	Node         string    `json:"node,omitempty"`
	Timestamp    time.Time `json:"timestamp"`
	Role         string    `json:"role"`
	Input        string    `json:"input"`
	Constitution string    `json:"constitution,omitempty"`
	SystemPrompt string    `json:"system_prompt,omitempty"`
	Decision     string    `json:"decision,omitempty"`
	Fallback     string    `json:"fallback,omitempty"` // why Decision is not the model's own
	ToolUsage    []ToolUse `json:"tool_usage,omitempty"`
	Response     string    `json:"response"`
	NextAgent    *string   `json:"next_agent"`
	Model        string    `json:"model,omitempty"`
	// ServedModel is the model as the provider named it in its reply
	// ("gpt-4o-mini-2024-07-18" for "openai:gpt-4o-mini"), where it named
	// one; Parameters, the sampling parameters the call sent.
	ServedModel string      `json:"served_model,omitempty"`
	Parameters  *Parameters `json:"parameters,omitempty"`
	Usage       *Usage      `json:"usage,omitempty"`
	// Withheld names the superego that withheld this step (docs/gating.md): a
	// client sees it with an empty response and no tool usage.
	Withheld string `json:"withheld,omitempty"`
	// Chunks are a judge's judgements of a draft as it streamed (docs/gating.md).
	Chunks []Chunk `json:"chunks,omitempty"`
	// LatencyMS is the model call's; an int32 (24 days) beside the flags
	// below, so that a Step fills a 448-byte allocation, not a 480-byte one.
	LatencyMS int32 `json:"latency_ms,omitempty"`
	// Reused says a replay took this step from the run it replays, with no
	// model call (docs/experiments.md); Cached, that its model's reply came from the
	// reply cache.
	Reused bool `json:"reused,omitempty"`
	Cached bool `json:"cached,omitempty"`
	// Shared, with Cached, says the reply was that of the same call in
	// flight for another run, rather than one the cache kept.
	Shared bool `json:"shared,omitempty"`
	// Judged, on a superego's step, says it judged a tool call or its
	// result (docs/actions.md) rather than a message.
	Judged *Judged `json:"judged,omitempty"`
	// ReviewID, on a person's review, names what it answers: a tool call
	// that waited for approval, or the step that asked for review.
	ReviewID string `json:"review_id,omitempty"`
	// Stack, on a superego's step, is the stack it was judged under: the
	// floor (its own constitution, in Constitution) first, then the user
	// constitutions of the run with their levels; Basis is what it said
	// its decision rests on: "floor", a name of the stack, or "other"
	// (docs/stacks.md).
	Stack []StackEntry `json:"stack,omitempty"`
	Basis string       `json:"basis,omitempty"`

	Thinking      string `json:"-"`
	AgentGuidance string `json:"-"`
	// What a withheld step held: shown only where hidden fields are.
	WithheldResponse  string    `json:"-"`
	WithheldToolUsage []ToolUse `json:"-"`
}

// Chunk is one judgement of a streaming draft: the draft's visible
// response up to End characters had been judged when it was made.
type Chunk struct {
	End      int    `json:"end"`
	Decision string `json:"decision"`
}

// ToolUse is one tool call of a step and its result.
type ToolUse struct {
	ID       string          `json:"id,omitempty"` // the provider's tool call id
	ToolName string          `json:"tool_name"`
	Input    json.RawMessage `json:"input"`
	Output   string          `json:"output"`
	Error    string          `json:"error,omitempty"`
	// Proposed says the call is a change that waits for a person's review
	// before it applies: a supervisor's with review_changes.
	Proposed bool `json:"proposed,omitempty"`
	// How the call was decided (docs/actions.md): by a judge's step or a rule;
	// Refused, it never ran; Awaiting, it waits for a person's review.
	// ResultJudgedBy is the judgement of its result, where one was made.
	JudgedBy       *JudgedBy `json:"judged_by,omitempty"`
	ResultJudgedBy *JudgedBy `json:"result_judged_by,omitempty"`
	Refused        bool      `json:"refused,omitempty"`
	Awaiting       bool      `json:"awaiting_review,omitempty"`
	// Client marks a call of a client's own tool (docs/gateway.md); AwaitingResult
	// a call the client was sent, whose result has not come back.
	Client         bool `json:"client,omitempty"`
	AwaitingResult bool `json:"awaiting_result,omitempty"`
	// WithheldOutput is the result a result judge kept from the model:
	// hidden, shown only where hidden fields are.
	WithheldOutput string `json:"-"`
}

// ResultText is the call's result as the model reads it, and as a judge of
// results is shown it (docs/actions.md: byte for byte the same).
func (u ToolUse) ResultText() string {
	if u.Error != "" {
		return "error: " + u.Error
	}
	return u.Output
}

// Judged is what a judgement step judged: an agent's tool call, or the
// call's result.
type Judged struct {
	Node       string `json:"node"`
	ToolCallID string `json:"tool_call_id"`
	ToolName   string `json:"tool_name"`
	Kind       string `json:"kind"` // KindCall or KindResult
}

// JudgedBy says what decided a call: a judge's step and its decision, or
// a permission rule as written.
type JudgedBy struct {
	Node     string `json:"node,omitempty"`
	StepID   string `json:"step_id,omitempty"`
	Decision string `json:"decision,omitempty"`
	Rule     string `json:"rule,omitempty"`
}

// Parameters are the sampling parameters a model call sent its provider,
// as its request carried them: each nil where the request did not carry
// it, and the provider used its own default.
type Parameters struct {
	Temperature *float64 `json:"temperature"`
	TopP        *float64 `json:"top_p"`
	Seed        *int64   `json:"seed"`
	MaxTokens   *int64   `json:"max_tokens"`
}

// Usage counts a model call's tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// Kinds of a judgement of an action (docs/actions.md).
const (
	KindCall   = "call"
	KindResult = "result"
)

// Millis is d in whole milliseconds for LatencyMS, at most math.MaxInt32.
func Millis(d time.Duration) int32 {
	return int32(min(d.Milliseconds(), math.MaxInt32))
}
