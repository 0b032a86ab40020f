package agents

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestResponseStreamEmitsOnlyResponse(t *testing.T) {
	reply := `Sure. ` + "```json\n" + `{"thinking": "SECRET \"quoted\" {nested} response: no", "decision": "ACCEPT", "agent_guidance": "HIDDEN", "meta": {"response": "inner"}, "response": "Hello \"world\"\n\u00e9 \ud83d\ude00 done \ud800x ok"}` + "\n```"
	want := "Hello \"world\"\n\u00e9 \U0001F600 done \uFFFDx ok"
	for _, size := range []int{1, 2, 3, 5, 7, 1000} {
		var got strings.Builder
		r := &responseStream{emit: func(s string) { got.WriteString(s) }}
		for i := 0; i < len(reply); i += size {
			r.Write([]byte(reply[i:min(i+size, len(reply))]))
		}
		if got.String() != want {
			t.Errorf("chunk size %d: got %q, want %q", size, got.String(), want)
		}
		f, ok := parseReply(reply)
		if !ok || f.Response != want || f.Thinking == "" || f.AgentGuidance != "HIDDEN" || f.Decision != "ACCEPT" {
			t.Errorf("parseReply = %+v, %v", f, ok)
		}
	}
}

func TestParseReplyValuesThatAreNotStrings(t *testing.T) {
	for _, c := range []struct {
		reply string
		want  fields
		ok    bool
	}{
		{`{"decision": "COMPLETE", "response": {"total": 50}}`, fields{Decision: "COMPLETE", Response: `{"total": 50}`}, true},
		{`{"thinking": null, "decision": "ACCEPT", "response": 7}`, fields{Decision: "ACCEPT", Response: "7"}, true},
		{`{"response": ""}`, fields{}, true}, // a protocol key, empty: still the protocol's object
		{`{"answer": "50"} {"decision": "BLOCK", "response": "no"}`, fields{Decision: "BLOCK", Response: "no"}, true},
		{`{"answer": "50"}`, fields{}, false},
		{`{"decision": "ACCEPT", "response": "cut off`, fields{}, false},
	} {
		if f, ok := parseReply(c.reply); f != c.want || ok != c.ok {
			t.Errorf("parseReply(%s) = %+v, %v; want %+v, %v", c.reply, f, ok, c.want, c.ok)
		}
	}
}

// Where plainObject reads an object, encoding/json reads the same fields
// from it; the seeds run with every go test, the fuzzer with -fuzz.
func FuzzPlainObjectReadsAsJSONDoes(f *testing.F) {
	for _, s := range []string{
		`{"thinking": "fine", "decision": "ACCEPT", "agent_guidance": "none", "response": "ok"}`,
		"{\n\t\"decision\" :\"BLOCK\" ,\r\n \"response\":\"no\"}",
		`{"response": "", "decision": "ACCEPT", "decision": "BLOCK"}`,
		`{"Decision": "ACCEPT"}`,
		`{"decision": "ACCEPT", "extra": "x"}`,
		`{"decision": "ACCEPT",}`,
		`{"decision": "caf\u00e9"}`,
		`{"decision": "café"}`,
		`{}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		end := objectEnd(s)
		if !strings.HasPrefix(s, "{") || end < 0 {
			return
		}
		got, ok := plainObject(s[:end])
		if !ok {
			return
		}
		var want fields
		if err := json.Unmarshal([]byte(s[:end]), &want); err != nil || got != want {
			t.Errorf("plainObject(%q) = %+v; encoding/json: %+v, %v", s[:end], got, want, err)
		}
	})
}
