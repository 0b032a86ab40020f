package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/api"
	"superego/constitutions"
	"superego/engine"
	"superego/flow"
	"superego/flows"
	"superego/memstore"
)

// Markers planted in the judge's hidden fields: they must never come out.
const (
	thinkingMarker = "THINKING-MARKER-5c1e"
	guidanceMarker = "GUIDANCE-MARKER-77ab"
)

func constitution(tb testing.TB) string {
	tb.Helper()
	b, err := constitutions.FS.ReadFile("sg_phase.md")
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// judgeOnce runs sg-judge in-process on a request.
func judgeOnce(tb testing.TB, req request, env map[string]string) (code int, stdout, stderr string) {
	tb.Helper()
	body, _ := json.Marshal(req)
	var out, errb bytes.Buffer
	code = run(context.Background(), bytes.NewReader(body), &out, &errb, func(k string) string { return env[k] })
	return code, out.String(), errb.String()
}

func TestJudgeWithProvider(t *testing.T) {
	srv := agentstest.Anthropic(t, func(r agentstest.Request) agentstest.Answer {
		return agentstest.Reply(thinkingMarker, "READY", guidanceMarker, "Implement JWT auth in auth.ts.")
	})
	req := request{Model: "anthropic:claude-test", Timeout: time.Minute, Constitution: constitution(t) + "\nHOUSE-RULE-3f1a\n", Input: "The user's new message: go ahead"}
	code, out, stderr := judgeOnce(t, req, map[string]string{"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": srv.URL})
	if want := `{"phase":"READY","reason":"Implement JWT auth in auth.ts."}` + "\n"; code != 0 || out != want {
		t.Errorf("exit %d\n got %s\nwant %s\nstderr %s", code, out, want, stderr)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 || !strings.Contains(reqs[0].System, "HOUSE-RULE-3f1a") || !strings.Contains(reqs[0].LastUser(), "go ahead") {
		t.Errorf("the judge was asked: %+v", reqs)
	}
	if strings.Contains(out+stderr, thinkingMarker) || strings.Contains(out+stderr, guidanceMarker) {
		t.Error("the judge's thinking or agent_guidance came out")
	}
}

func TestJudgeFailures(t *testing.T) {
	for _, c := range []struct {
		name     string
		body     string
		wantCode int
		want     string
	}{
		{"not JSON", `{"model": `, 2, "sg-judge: the request is not JSON: unexpected EOF\n"},
		{"no constitution", `{"model": "offline", "input": "hi"}`, 1, "sg-judge: no constitution\n"},
		{"an unknown provider", `{"model": "nosuch:model", "constitution": "judge", "input": "hi"}`, 1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), strings.NewReader(c.body), &out, &errb, func(string) string { return "" })
			if code != c.wantCode || out.Len() != 0 || (c.want != "" && errb.String() != c.want) || !strings.HasPrefix(errb.String(), "sg-judge: ") {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, %q", code, out.String(), errb.String(), c.wantCode, c.want)
			}
		})
	}
}

func TestJudgeWithClaudeCLI(t *testing.T) {
	session := filepath.Join(t.TempDir(), ".superego", "session")
	bin := t.TempDir()
	// A fake claude: it checks it was asked as sg-judge asks, and answers in
	// claude -p's JSON output.
	script := `#!/bin/sh
[ "$SUPEREGO_DISABLED" = 1 ] || { echo "hooks would gate the evaluator" >&2; exit 1; }
[ "$1" = -p ] && [ "$3" = json ] || { echo "bad args: $*" >&2; exit 1; }
case "$PWD" in */.superego/session) ;; *) echo "runs in the project: $PWD" >&2; exit 1;; esac
input=$(cat)
case "$input" in *"Should we use sessions or JWT?"*) ;; *) echo "no conversation in prompt" >&2; exit 1;; esac
cat <<'OUT'
{"type":"result","subtype":"success","is_error":false,"duration_ms":1200,"num_turns":1,"result":"{\"thinking\": \"` + thinkingMarker + `\", \"decision\": \"DISCUSSING\", \"agent_guidance\": \"` + guidanceMarker + `\", \"response\": \"Which token lifetime to use is still open.\"}","session_id":"x","total_cost_usd":0.001}
OUT
`
	if err := os.WriteFile(filepath.Join(bin, "claude"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	req := request{Model: "claude-cli", Timeout: time.Minute, Constitution: constitution(t), Input: "User: Should we use sessions or JWT?", SessionDir: session}
	code, out, stderr := judgeOnce(t, req, nil)
	if want := `{"phase":"DISCUSSING","reason":"Which token lifetime to use is still open."}` + "\n"; code != 0 || out != want || stderr != "" {
		t.Errorf("exit %d\n got %s\nwant %s\nstderr %s", code, out, want, stderr)
	}
}

func TestJudgeOnServer(t *testing.T) {
	defBytes, _ := flows.FS.ReadFile("sg_phase.json")
	def, err := flow.Parse(defBytes, flow.Catalog{Providers: agents.ProviderNames, Texts: map[string]string{"sg_phase": constitution(t)}})
	if err != nil {
		t.Fatal(err)
	}
	model := agents.Model{LLM: agentstest.Func(func(agentstest.Request) agentstest.Answer {
		return agentstest.Reply(thinkingMarker, "READY", guidanceMarker, "Implement JWT auth.")
	}), Name: "func"}
	engine := &engine.Engine{Flows: map[string]*flow.Flow{"sg_phase": {ID: "sg_phase", Def: def}},
		Exec: &engine.Executor{Agent: &agents.Agent{Model: func(string) (agents.Model, error) { return model, nil }}}, Store: &memstore.Store{}}
	srv := httptest.NewServer((&api.Server{Engine: engine, Model: "func"}).Handler())
	defer srv.Close()
	code, out, stderr := judgeOnce(t, request{Server: srv.URL, Timeout: time.Minute, Input: "go ahead"}, nil)
	if want := `{"phase":"READY","reason":"Implement JWT auth."}` + "\n"; code != 0 || out != want {
		t.Errorf("exit %d\n got %s\nwant %s\nstderr %s", code, out, want, stderr)
	}
}
