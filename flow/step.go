package flow

import (
	"encoding/json"
	"errors"
	"fmt"
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
	// instance waits for their results (SPEC §4a).
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
	LatencyMS   int64       `json:"latency_ms,omitempty"`
	// Withheld names the superego that withheld this step (SPEC §3a): a
	// client sees it with an empty response and no tool usage.
	Withheld string `json:"withheld,omitempty"`
	// Chunks are a judge's judgements of a draft as it streamed (§3a).
	Chunks []Chunk `json:"chunks,omitempty"`
	// Reused says a replay took this step from the run it replays, with no
	// model call (SPEC §7); Cached, that its model's reply came from the
	// reply cache.
	Reused bool `json:"reused,omitempty"`
	Cached bool `json:"cached,omitempty"`
	// Shared, with Cached, says the reply was that of the same call in
	// flight for another run, rather than one the cache kept.
	Shared bool `json:"shared,omitempty"`
	// Judged, on a superego's step, says it judged a tool call or its
	// result (SPEC §3c) rather than a message.
	Judged *Judged `json:"judged,omitempty"`
	// ReviewID, on a person's review, names what it answers: a tool call
	// that waited for approval, or the step that asked for review.
	ReviewID string `json:"review_id,omitempty"`
	// Stack, on a superego's step, is the stack it was judged under: the
	// floor (its own constitution, in Constitution) first, then the user
	// constitutions of the run with their levels; Basis is what it said
	// its decision rests on: "floor", a name of the stack, or "other"
	// (SPEC §10).
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
	// How the call was decided (SPEC §3c): by a judge's step or a rule;
	// Refused, it never ran; Awaiting, it waits for a person's review.
	// ResultJudgedBy is the judgement of its result, where one was made.
	JudgedBy       *JudgedBy `json:"judged_by,omitempty"`
	ResultJudgedBy *JudgedBy `json:"result_judged_by,omitempty"`
	Refused        bool      `json:"refused,omitempty"`
	Awaiting       bool      `json:"awaiting_review,omitempty"`
	// Client marks a call of a client's own tool (SPEC §4a); AwaitingResult
	// a call the client was sent, whose result has not come back.
	Client         bool `json:"client,omitempty"`
	AwaitingResult bool `json:"awaiting_result,omitempty"`
	// WithheldOutput is the result a result judge kept from the model:
	// hidden, shown only where hidden fields are.
	WithheldOutput string `json:"-"`
}

// ResultText is the call's result as the model reads it, and as a judge of
// results is shown it (SPEC §3c: byte for byte the same).
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

// Event names, as they appear on the wire.
const (
	EventRunStart     = "run_start"
	EventNodeStart    = "node_start"
	EventPartial      = "partial_output"
	EventToolCall     = "tool_call"
	EventToolResult   = "tool_result"
	EventCompleteStep = "complete_step"
	EventError        = "error"
	EventDone         = "done"
)

// Event is one entry of an instance's event sequence. Data is one of the
// payload types below, or a Step for complete_step.
type Event struct {
	ID   int64
	Name string
	Time time.Time
	Data any
}

// Payloads of events.
type (
	RunStart struct {
		InstanceID string `json:"instance_id"`
		RunID      string `json:"run_id"`
		FlowID     string `json:"flow_id"`
		Resumed    bool   `json:"resumed,omitempty"`
		RunOptions
	}
	NodeStart struct {
		Node    string `json:"node"`
		AgentID string `json:"agent_id"`
	}
	Partial struct {
		StepID  string `json:"step_id"`
		Node    string `json:"node"`
		AgentID string `json:"agent_id"`
		Delta   string `json:"delta"`
	}
	ToolCall struct {
		Node       string          `json:"node"`
		ToolName   string          `json:"tool_name"`
		Input      json.RawMessage `json:"input"`
		ToolCallID string          `json:"tool_call_id,omitempty"`
	}
	ToolResult struct {
		Node       string    `json:"node"`
		ToolName   string    `json:"tool_name"`
		Output     string    `json:"output"`
		Error      string    `json:"error,omitempty"`
		ToolCallID string    `json:"tool_call_id,omitempty"`
		JudgedBy   *JudgedBy `json:"judged_by,omitempty"`
		Refused    bool      `json:"refused,omitempty"`
	}
	ErrorData struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Node    string `json:"node,omitempty"` // where the run failed, if at a node
	}
	Done struct {
		InstanceID string        `json:"instance_id"`
		Status     string        `json:"status"`
		Response   string        `json:"response"`
		Usage      *RunUsage     `json:"usage,omitempty"`  // always set; nil only in a log written before it was
		Replay     *ReplayCounts `json:"replay,omitempty"` // of a replayed run
		// ToolCalls, for a run awaiting_tool_result, are the calls the
		// client is to run and answer (SPEC §4a).
		ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	}
)

// RunUsage counts a run's tokens: those of the calls it kept, and apart
// those of speculative calls it discarded (SPEC §3b).
type RunUsage struct {
	PromptTokens                int `json:"prompt_tokens"`
	CompletionTokens            int `json:"completion_tokens"`
	SpeculativePromptTokens     int `json:"speculative_prompt_tokens"`
	SpeculativeCompletionTokens int `json:"speculative_completion_tokens"`
}

// Sentinel errors. The api package maps each to a status code.
var (
	ErrNotFound = errors.New("not found")
	ErrInvalid  = errors.New("invalid")
	ErrBusy     = errors.New("a run is in progress on this instance")
	ErrTooMany  = errors.New("too many runs in flight")
	ErrClosed   = errors.New("the server is shutting down")
	ErrIdle     = errors.New("no run in progress")
	ErrNoReview = errors.New("the instance is not awaiting review")
	ErrNoWait   = errors.New("the instance is not awaiting its client's tool results")

	// ErrInputInFlight is ErrTooMany for the input the runs in flight hold
	// (Engine.MaxInput): a run's memory grows with its input.
	ErrInputInFlight = fmt.Errorf("too much input in flight: %w", ErrTooMany)

	// Errors a run can fail with; each has a stable code (ErrorCode).
	ErrModelUnavailable = errors.New("model unavailable")
	ErrModelOutput      = errors.New("unusable model output")
	ErrToolFailed       = errors.New("tool failed")
	ErrTimeout          = errors.New("timed out")
	// ErrStorage is a write of the store that failed (a full disk, a lost
	// database): a run whose events could not all be saved ends failed,
	// never completed.
	ErrStorage = errors.New("the run's events could not be saved")
)

// ErrorCode is the stable word an error event carries for err.
func ErrorCode(err error) string {
	switch {
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrModelUnavailable):
		return "llm_unavailable"
	case errors.Is(err, ErrModelOutput):
		return "llm_bad_output"
	case errors.Is(err, ErrToolFailed):
		return "tool_failed"
	case errors.Is(err, ErrStorage):
		return "storage"
	}
	return "internal"
}

// Kinds of a judgement of an action (SPEC §3c).
const (
	KindCall   = "call"
	KindResult = "result"
)
