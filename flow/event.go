package flow

import (
	"encoding/json"
	"time"
)

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
// payload types below, or a *Step for complete_step: a run's log and every
// event of the step share that one record, so nothing changes a step once
// it is in an event; a change is a new record.
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
		// client is to run and answer (docs/gateway.md).
		ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	}
)

// RunUsage counts a run's tokens: those of the calls it kept, and apart
// those of speculative calls it discarded (docs/gating.md).
type RunUsage struct {
	PromptTokens                int `json:"prompt_tokens"`
	CompletionTokens            int `json:"completion_tokens"`
	SpeculativePromptTokens     int `json:"speculative_prompt_tokens"`
	SpeculativeCompletionTokens int `json:"speculative_completion_tokens"`
}
