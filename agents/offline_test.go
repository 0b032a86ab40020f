package agents_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tmc/langchaingo/llms"

	"superego/agents"
	"superego/tools"
)

// The offline agent calls a built-in tool the message names exactly, with
// the arguments its key=value words give, and "offline" for a required one
// they lack; a client's tool as before, a word of its name in the message;
// never an MCP tool; and the calculator where there is arithmetic.
func TestOfflineCallsTheToolTheMessageNames(t *testing.T) {
	t.Parallel()
	ws := tools.Builtin(nil, &tools.Workspaces{Root: t.TempDir()})
	offered := func(names ...string) []llms.Tool {
		var out []llms.Tool
		for _, n := range names {
			var params any = map[string]any{"type": "object"}
			if tool, ok := ws[n]; ok {
				params = tool.Parameters
			}
			switch n {
			case "send_email":
				params = map[string]any{"type": "object", "required": []string{"to", "body"}, "properties": map[string]any{
					"to": map[string]any{"type": "string"}, "body": map[string]any{"type": "string"},
					"urgent": map[string]any{"type": "boolean"}, "copies": map[string]any{"type": "integer"}}}
			case "mcp__fs__write_file":
				params = ws["write_file"].Parameters
			}
			out = append(out, llms.Tool{Type: "function", Function: &llms.FunctionDefinition{Name: n, Parameters: params}})
		}
		return out
	}
	for _, c := range []struct {
		input string
		tools []string
		want  string // the calls, as name(arguments) in order; "" for none
	}{
		{"write_file path=.env content=API_KEY=secret", []string{"calculator", "write_file", "delete_file"},
			`write_file({"content":"API_KEY=secret","path":".env"})`},
		{"write_file path=notes/a.md", []string{"write_file"}, `write_file({"content":"offline","path":"notes/a.md"})`},
		{"please write_file then delete_file path=old.txt mode=fast", []string{"write_file", "delete_file"},
			`write_file({"content":"offline","path":"old.txt"}) delete_file({"path":"old.txt"})`},
		{"list_files", []string{"list_files"}, `list_files({})`},
		{"Write a file for me, please.", []string{"write_file"}, ""},
		{"mcp__fs__write_file path=x", []string{"mcp__fs__write_file"}, ""},
		{"write_file path=x", []string{"read_file"}, ""},
		{"write_file path=sum.txt content=6*7", []string{"calculator", "write_file"}, `calculator({"expression":"6*7"})`},
		{"Email anna", []string{"send_email"}, `send_email({"body":"offline","to":"offline"})`},
		{"Email to=anna@example.com urgent=true copies=2 body=hi", []string{"send_email"},
			`send_email({"body":"hi","copies":2,"to":"anna@example.com","urgent":true})`},
		{"Email urgent=yes copies=two", []string{"send_email"},
			`send_email({"body":"offline","copies":"two","to":"offline","urgent":"yes"})`},
	} {
		msgs := []llms.MessageContent{
			llms.TextParts(llms.ChatMessageTypeSystem, "You are an assistant.\n\nDecide with exactly one of: COMPLETE, NEEDS_TOOL."),
			llms.TextParts(llms.ChatMessageTypeHuman, c.input),
		}
		resp, err := agents.Offline{}.GenerateContent(context.Background(), msgs, llms.WithTools(offered(c.tools...)))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, call := range resp.Choices[0].ToolCalls {
			var args map[string]any
			if err := json.Unmarshal([]byte(call.FunctionCall.Arguments), &args); err != nil {
				t.Fatalf("%q: arguments %s: %v", c.input, call.FunctionCall.Arguments, err)
			}
			b, _ := json.Marshal(args)
			got = append(got, call.FunctionCall.Name+"("+string(b)+")")
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%q offered %v: calls %s, want %s", c.input, c.tools, strings.Join(got, " "), c.want)
		}
		if c.want == "" && !strings.Contains(resp.Choices[0].Content, "offline model") {
			t.Errorf("%q: no call, and a reply %q that does not say it is the offline model's", c.input, resp.Choices[0].Content)
		}
	}
}
