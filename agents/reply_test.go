package agents

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestResponseStreamEmitsOnlyResponse(t *testing.T) {
	t.Parallel()
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

// A stacked judge's basis comes before its response: the stream passes
// on the response and nothing of the basis.
func TestResponseStreamSkipsTheBasis(t *testing.T) {
	t.Parallel()
	reply := `{"thinking": "t", "decision": "BLOCK", "agent_guidance": "g", "basis": "BASIS-MARKER", "response": "Not that one."}`
	for _, size := range []int{1, 3, 1000} {
		var got strings.Builder
		r := &responseStream{emit: func(s string) { got.WriteString(s) }}
		for i := 0; i < len(reply); i += size {
			r.Write([]byte(reply[i:min(i+size, len(reply))]))
		}
		if got.String() != "Not that one." {
			t.Errorf("chunk size %d: streamed %q", size, got.String())
		}
	}
	if f := readReply(reply); f.Basis != "BASIS-MARKER" || f.Response != "Not that one." {
		t.Errorf("readReply = %+v", f)
	}
	if f := readReply(`{"decision": "ACCEPT", "response": ""}`); f.Basis != "" {
		t.Errorf("a reply with no basis read as %+v", f)
	}
}

func TestParseReplyValuesThatAreNotStrings(t *testing.T) {
	t.Parallel()
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
		{`{"thinking": "t", "decision": "BLOCK", "agent_guidance": "", "basis": "vegan", "response": "no"}`, fields{Thinking: "t", Decision: "BLOCK", Basis: "vegan", Response: "no"}, true},
		{`{"decision": "BLOCK", "response": "no", "basis": "caf\u00e9"}`, fields{Decision: "BLOCK", Basis: "café", Response: "no"}, true},
		{`{"decision": "BLOCK", "basis": ["floor"], "response": "no"}`, fields{Decision: "BLOCK", Basis: `["floor"]`, Response: "no"}, true},
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
		`{"thinking": "t", "decision": "BLOCK", "agent_guidance": "g", "basis": "floor", "response": "no"}`,
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

// Markers in a reply's hidden fields, for the malformed-reply tests.
const (
	hiddenThinking = "THINK-7f3a-private reasoning"
	hiddenGuidance = "GUIDE-91c2-note for the next agent"
)

// protocol is the reply object with the markers, as a model writes it.
func protocol(decision, response string) string {
	return `{"thinking": "` + hiddenThinking + `", "decision": "` + decision + `", "agent_guidance": "` + hiddenGuidance + `", "response": "` + response + `"}`
}

// Replies that start as the protocol's object and do not parse give at most
// their response, as it streamed, and a decision word; the rest is hidden.
func TestMalformedRepliesKeepHiddenFieldsHidden(t *testing.T) {
	t.Parallel()
	whole := protocol("BLOCK", "I can't help with that.")
	for _, c := range []struct {
		name, reply      string
		response, decide string
	}{
		{"cut at the token limit in the response", whole[:len(whole)-12], "I can't help ", "BLOCK"},
		{"cut in the guidance", whole[:strings.Index(whole, "next agent")], "", "BLOCK"},
		{"cut in the thinking", whole[:30], "", ""},
		{"a trailing comma", strings.TrimSuffix(whole, "}") + ",}", "I can't help with that.", "BLOCK"},
		{"a missing comma", strings.Replace(whole, `", "agent_guidance"`, `" "agent_guidance"`, 1), "I can't help with that.", "BLOCK"},
		{"single quotes", strings.ReplaceAll(whole, `"`, `'`), "", ""},
		{"an unquoted decision", strings.Replace(whole, `"BLOCK"`, `BLOCK`, 1), "I can't help with that.", "BLOCK"},
		{"in a code fence, cut", "```json\n" + whole[:len(whole)-5], "I can't help with th", "BLOCK"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := readReply(c.reply)
			if f.Response != c.response || f.Decision != c.decide || f.Thinking != c.reply {
				t.Errorf("readReply(%s) = %+v\nwant response %q, decision %q, the text in thinking", c.reply, f, c.response, c.decide)
			}
			// What streamed to the client is the same response.
			var streamed strings.Builder
			(&responseStream{emit: func(s string) { streamed.WriteString(s) }}).Write([]byte(c.reply))
			if streamed.String() != f.Response {
				t.Errorf("streamed %q, step response %q", streamed.String(), f.Response)
			}
		})
	}
	// Prose is still the response.
	if f := readReply("The answer is 42 {roughly}."); f.Response != "The answer is 42 {roughly}." || f.Thinking != "" {
		t.Errorf("prose: %+v", f)
	}
}

// FuzzMalformedReplyHidesHiddenFields: whatever is done to a protocol object
// with markers in thinking and agent_guidance (cut anywhere, a byte deleted,
// a byte put in, quotes swapped), no byte of either marker is in what a
// client can see of the reply: its response and its decision.
func FuzzMalformedReplyHidesHiddenFields(f *testing.F) {
	f.Add("ACCEPT", "Fine.", "", uint16(0), byte(0), uint8(0))
	f.Add("BLOCK", "No, I won't.", "Sure! ", uint16(60), byte(','), uint8(1))
	f.Add("CAUTION", `He said "hi".`, "```json\n", uint16(200), byte('"'), uint8(2))
	f.Add("NEEDS_CLARIFICATION", "Which one?", "", uint16(90), byte('\''), uint8(3))
	f.Fuzz(func(t *testing.T, decision, response, preamble string, at uint16, b byte, op uint8) {
		q := func(s string) string { j, _ := json.Marshal(s); return string(j) }
		text := preamble + `{"thinking": ` + q(hiddenThinking) + `, "decision": ` + q(decision) + `, "agent_guidance": ` + q(hiddenGuidance) + `, "response": ` + q(response) + `}`
		i := int(at) % (len(text) + 1)
		switch op % 4 {
		case 0:
			text = text[:i]
		case 1:
			if i < len(text) {
				text = text[:i] + text[i+1:]
			}
		case 2:
			text = text[:i] + string(b) + text[i:]
		case 3:
			text = strings.ReplaceAll(text, `"`, `'`)
		}
		got := readReply(text)
		visible := got.Response + "\x00" + got.Decision
		for _, marker := range []string{hiddenThinking, hiddenGuidance} {
			for _, part := range []string{marker[:5], marker[6:10], marker[11:]} {
				if strings.Contains(visible, part) && !strings.Contains(preamble+decision+response, part) {
					t.Fatalf("readReply(%q) shows %q of a hidden field: %+v", text, part, got)
				}
			}
		}
	})
}
