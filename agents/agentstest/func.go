package agentstest

import (
	"context"
	"net/http"
	"time"

	"github.com/tmc/langchaingo/llms"
)

// Func is an llms.Model answered in-process by a script: no HTTP, no
// serialisation, for benchmarks of everything but the provider. Its text
// streams in one chunk; Status, Delay and Hang are honoured.
type Func func(Request) Answer

var _ llms.Model = Func(nil)

func (f Func) Call(ctx context.Context, prompt string, options ...llms.CallOption) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, f, prompt, options...)
}

func (f Func) GenerateContent(ctx context.Context, messages []llms.MessageContent, options ...llms.CallOption) (*llms.ContentResponse, error) {
	var opts llms.CallOptions
	for _, o := range options {
		o(&opts)
	}
	req := Request{Provider: "func", JSONMode: opts.JSONMode}
	for _, t := range opts.Tools {
		req.Tools = append(req.Tools, t.Function.Name)
	}
	for _, m := range messages {
		msg := Message{}
		for _, p := range m.Parts {
			switch p := p.(type) {
			case llms.TextContent:
				msg.Text += p.Text
			case llms.ToolCall:
				msg.ToolCalls = append(msg.ToolCalls, Call{ID: p.ID, Name: p.FunctionCall.Name, Args: p.FunctionCall.Arguments})
			case llms.ToolCallResponse:
				msg.ToolCallID, msg.Text = p.ToolCallID, p.Content
			}
		}
		switch m.Role {
		case llms.ChatMessageTypeSystem:
			req.System += msg.Text
			continue
		case llms.ChatMessageTypeHuman:
			msg.Role = "user"
		case llms.ChatMessageTypeAI:
			msg.Role = "assistant"
		case llms.ChatMessageTypeTool:
			msg.Role = "tool"
		}
		req.Messages = append(req.Messages, msg)
	}
	a := f(req)
	switch {
	case a.Hang:
		<-ctx.Done()
		return nil, ctx.Err()
	case a.Delay > 0:
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(a.Delay):
		}
	}
	if a.Status != 0 && a.Status != http.StatusOK {
		return nil, &statusError{a.Status, a.Text}
	}
	if opts.StreamingFunc != nil && a.Text != "" {
		if err := opts.StreamingFunc(ctx, []byte(a.Text)); err != nil {
			return nil, err
		}
	}
	choice := &llms.ContentChoice{Content: a.Text, GenerationInfo: map[string]any{"PromptTokens": 11, "CompletionTokens": 7}}
	for _, c := range a.ToolCalls {
		choice.ToolCalls = append(choice.ToolCalls, llms.ToolCall{ID: c.ID, Type: "function", FunctionCall: &llms.FunctionCall{Name: c.Name, Arguments: c.Args}})
	}
	return &llms.ContentResponse{Choices: []*llms.ContentChoice{choice}}, nil
}

type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return http.StatusText(e.status) + ": " + e.msg }
