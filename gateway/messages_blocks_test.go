package gateway_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"superego/gateway"
)

// Claude Code's ToolSearch answers with references to the deferred tools
// it loads, not with text. A result judge reads each as its tool's name;
// an Anthropic upstream is sent the result as the client sent it, for it
// gives its model the definition the request's tools hold. Other blocks a
// judge cannot read are still refused.
func TestToolReferencesInResults(t *testing.T) {
	t.Parallel()
	request := func(content string) string {
		return `{"model": "guarded_coder", "max_tokens": 100,
		  "tools": [{"name": "ToolSearch", "input_schema": {"type": "object"}}, {"name": "WebFetch", "input_schema": {"type": "object"}, "defer_loading": true}],
		  "messages": [{"role": "user", "content": "Read the docs"},
		    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {"query": "select:WebFetch"}}]},
		    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": ` + content + `, "cache_control": {"type": "ephemeral"}}]}]}`
	}
	body := request(`[{"type": "tool_reference", "tool_name": "WebFetch"}, {"type": "text", "text": "loaded"}]`)
	req, err := gateway.Read(gateway.Messages, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	res := req.Results()
	if len(res) != 1 || res[0].Output != "tool_reference: WebFetch\nloaded" {
		t.Fatalf("results %+v", res)
	}
	turn := gateway.Turn{Model: "claude-test", Rounds: []gateway.Round{{
		Calls:   []gateway.Call{{ID: "toolu_1", Name: "ToolSearch", Args: `{"query":"select:WebFetch"}`}},
		Results: []gateway.Result{{CallID: "toolu_1", Output: res[0].Output}},
	}}}
	out, err := req.For(turn).Encode(gateway.Messages)
	if err != nil {
		t.Fatal(err)
	}
	var sent, got map[string]any
	json.Unmarshal([]byte(body), &sent)
	json.Unmarshal(out, &got)
	sent["model"] = "claude-test"
	if !reflect.DeepEqual(sent, got) {
		t.Errorf("the upstream is sent\n%s\nnot the client's\n%s", out, body)
	}

	for _, content := range []string{
		`[{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]`,
		`[{"type": "tool_reference"}]`,
	} {
		_, err := gateway.Read(gateway.Messages, []byte(request(content)))
		var e *gateway.Error
		if !errors.As(err, &e) || e.Status != 400 || e.Param != "messages.2.content.0.content" || !strings.Contains(e.Message, "must be text") {
			t.Errorf("%s: %v", content, err)
		}
	}
}

// A block of a type the judges do not read is refused by its type, whatever
// its other fields hold: a search result's source is a string, where an
// image's is an object.
func TestUnknownBlocksAreRefusedByType(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ block, param, message string }{
		{`{"type": "search_result", "source": "https://example.com", "title": "t", "content": [{"type": "text", "text": "x"}]}`,
			"messages.0.content.0.type", `"search_result" blocks are not taken`},
		{`{"type": "image", "source": "https://example.com/a.png"}`, "messages.0.content.0", "a image block is not taken in a user message, or misses a field"},
		{`{"type": "image", "source": null}`, "messages.0.content.0", "a image block is not taken in a user message, or misses a field"},
	} {
		_, err := gateway.Read(gateway.Messages, []byte(`{"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [`+c.block+`]}]}`))
		var e *gateway.Error
		if !errors.As(err, &e) || e.Status != 400 || e.Param != c.param || !strings.Contains(e.Message, c.message) {
			t.Errorf("%s: %v", c.block, err)
		}
	}
	req, err := gateway.Read(gateway.Messages, []byte(`{"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]}`))
	if err != nil || req.Items[0].Parts[0].Image == nil || req.Items[0].Parts[0].Image.URL != "https://example.com/a.png" {
		t.Errorf("an image: %v %+v", err, req)
	}
}
