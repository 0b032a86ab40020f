package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"superego/agents"
	"superego/agents/agentstest"
	"superego/flow"
	"superego/memstore"
)

// workerChecker serves the shipped worker_checker flow on a scripted model:
// the worker writes report.md and __output.json in one reply per cycle; the
// checker reads them, then passes the work at cycle passOn (never, for 0).
func workerChecker(t *testing.T, passOn int) (*fixture, func() []agentstest.Request) {
	t.Helper()
	def, err := os.ReadFile("../flows/worker_checker.json")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	cycle := 0
	var workerAsked []agentstest.Request
	model := agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		mu.Lock()
		defer mu.Unlock()
		switch r.Node() {
		case "worker":
			cycle++
			workerAsked = append(workerAsked, r)
			out, _ := json.Marshal(map[string]any{"summary": fmt.Sprintf("Draft %d", cycle), "files": []string{"report.md"}})
			report, _ := json.Marshal(map[string]string{"path": "report.md", "content": fmt.Sprintf("draft %d", cycle)})
			output, _ := json.Marshal(map[string]string{"path": "__output.json", "content": string(out)})
			return agentstest.Answer{ToolCalls: []agentstest.Call{
				{ID: "w1", Name: "write_file", Args: string(report)},
				{ID: "w2", Name: "write_file", Args: string(output)},
			}}
		case "checker":
			if len(r.ToolResults()) == 0 {
				return agentstest.Answer{ToolCalls: []agentstest.Call{
					{ID: "c1", Name: "list_files", Args: `{}`},
					{ID: "c2", Name: "read_file", Args: `{"path": "report.md"}`},
				}}
			}
			if cycle == passOn {
				return agentstest.Reply(thinkingMarker, "PASSED", `{"review_verdict": "passed"}`, "Verified report.md: complete.")
			}
			guidance, _ := json.Marshal(map[string]any{
				"review_verdict": "needs_improvement", "review_feedback": fmt.Sprintf("Add a conclusion (cycle %d) %s", cycle, guidanceMarker),
				"review_reason": "report.md ends mid-thought", "verified_items": []string{"report.md exists"}, "previous_attempt_summary": fmt.Sprintf("Draft %d", cycle),
			})
			return agentstest.Reply(thinkingMarker, "NEEDS_IMPROVEMENT", string(guidance), "report.md has no conclusion yet.")
		}
		return agentstest.Answer{Status: 400, Text: "unknown node"}
	})
	p := &agents.Providers{Default: "openai:gpt-test", OpenAIKey: "k", OpenAIBaseURL: model.URL + "/v1"}
	f := serveFlows(t, map[string]string{"worker_checker": string(def)}, &memstore.Store{}, p.Model, 0)
	return f, func() []agentstest.Request {
		mu.Lock()
		defer mu.Unlock()
		return append([]agentstest.Request(nil), workerAsked...)
	}
}

type runResult struct {
	InstanceID string      `json:"instance_id"`
	Status     string      `json:"status"`
	Response   string      `json:"response"`
	Steps      []flow.Step `json:"steps"`
	Guardrails guardrails  `json:"guardrails"`
}

type guardrails struct {
	Flagged       bool   `json:"flagged"`
	FlaggedInput  bool   `json:"flaggedInput"`
	FlaggedOutput bool   `json:"flaggedOutput"`
	Reason        string `json:"reason"`
}

func runTask(t *testing.T, f *fixture) (runResult, string) {
	t.Helper()
	body := `{"flow_id": "worker_checker", "objective": "Write a short report on tides.", "expected_output": "report.md, ending with a conclusion", "inputs": {"audience": "children"}}`
	code, res, raw := post(t, f.url+"/flow/execute", body)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	return res, raw
}

func TestWorkerPassesOnTheThirdCycle(t *testing.T) {
	t.Parallel()
	f, workerAsked := workerChecker(t, 3)
	res, raw := runTask(t, f)
	if res.Status != flow.StatusCompleted || res.Response != "Verified report.md: complete." {
		t.Fatalf("status %s, response %q", res.Status, res.Response)
	}
	var workerSteps []string
	for _, s := range res.Steps {
		if s.Node == "worker" {
			workerSteps = append(workerSteps, s.Decision+" "+s.Response)
		}
	}
	if strings.Join(workerSteps, "|") != "COMPLETE Draft 1|COMPLETE Draft 2|COMPLETE Draft 3" {
		t.Errorf("worker steps: %q; each cycle is one COMPLETE step whose response is the summary", workerSteps)
	}
	for n := 1; n <= 3; n++ {
		p, _ := f.ws.Resolve(res.InstanceID, fmt.Sprintf("__output_cycle_%04d.json", n))
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), fmt.Sprintf(`"summary":"Draft %d"`, n)) {
			t.Errorf("archive of cycle %d: %s %v", n, b, err)
		}
	}
	asked := workerAsked()
	if len(asked) != 3 {
		t.Fatalf("%d worker calls", len(asked))
	}
	text := func(r agentstest.Request) string {
		var b strings.Builder
		for _, m := range r.Messages {
			b.WriteString(m.Text + "\n")
		}
		return b.String()
	}
	first := text(asked[0])
	for _, want := range []string{"Objective:\nWrite a short report on tides.", "Expected output:\nreport.md, ending with a conclusion", `"audience": "children"`} {
		if !strings.Contains(first, want) {
			t.Errorf("the worker's task lacks %q:\n%s", want, first)
		}
	}
	if !strings.Contains(asked[0].System, "__output.json") {
		t.Error("the worker was not told the output protocol")
	}
	if second := text(asked[1]); !strings.Contains(second, "Add a conclusion (cycle 1)") || !strings.Contains(second, `"review_verdict":"needs_improvement"`) {
		t.Errorf("cycle 1's feedback is not in cycle 2's prompt:\n%s", second)
	}
	if strings.Contains(text(asked[2]), "Add a conclusion (cycle 1)") && !strings.Contains(text(asked[2]), "Add a conclusion (cycle 2)") {
		t.Error("cycle 3 got stale feedback")
	}
	if strings.Contains(raw, thinkingMarker) || strings.Contains(raw, guidanceMarker) || strings.Contains(raw, "Add a conclusion") {
		t.Error("the checker's thinking or guidance reached the client")
	}

	// The workspace's files can be downloaded, as attachments.
	resp, err := http.Get(f.url + "/flow/instances/" + res.InstanceID + "/files/report.md")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	n, _ := resp.Body.Read(b)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b[:n]) != "draft 3" || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("download: %d %q %v", resp.StatusCode, b[:n], resp.Header)
	}
}

func TestWorkerThatNeverPasses(t *testing.T) {
	t.Parallel()
	f, workerAsked := workerChecker(t, 0)
	res, _ := runTask(t, f)
	if res.Status != flow.StatusIterationLimit || len(workerAsked()) != 3 {
		t.Fatalf("status %s after %d worker cycles; want iteration_limit after 3", res.Status, len(workerAsked()))
	}
	if p, _ := f.ws.Resolve(res.InstanceID, "__output_cycle_0003.json"); !exists(p) {
		t.Error("the third cycle's output was not archived")
	}
	if p, _ := f.ws.Resolve(res.InstanceID, "__output_cycle_0004.json"); exists(p) {
		t.Error("a fourth cycle ran")
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func TestDownloadStaysInTheWorkspace(t *testing.T) {
	f, _ := workerChecker(t, 1)
	res, _ := runTask(t, f)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("SECRET"), 0o644)
	dir, _ := f.ws.Resolve(res.InstanceID, ".")
	os.Symlink(outside, filepath.Join(dir, "link"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "secret-link"))
	base := f.url + "/flow/instances/" + res.InstanceID + "/files/"
	for _, p := range []string{"..%2F..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "link/secret", "link%2Fsecret", "secret-link", "a%00b", "..%2f" + res.InstanceID + "%2freport.md"} {
		code, _, body := get(t, base+p)
		if code != 400 || strings.Contains(body, "SECRET") || strings.Contains(body, "root:") {
			t.Errorf("GET files/%s: %d %s", p, code, body)
		}
	}
	for _, p := range []string{"nope.md", "."} {
		if code, _, _ := get(t, base+p); code != 404 && code != 400 {
			t.Errorf("GET files/%s: %d", p, code)
		}
	}
	if code, _, _ := get(t, f.url+"/flow/instances/00000000-0000-0000-0000-000000000000/files/report.md"); code != 404 {
		t.Errorf("unknown instance: %d", code)
	}
	// A raw "../" is cleaned by no one on the way: the route refuses it too.
	req, _ := http.NewRequest(http.MethodGet, base+"x", nil)
	req.URL.Path = "/flow/instances/" + res.InstanceID + "/files/../../../etc/passwd"
	req.URL.RawPath = ""
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 200 {
		t.Errorf("raw ../: %d", resp.StatusCode)
	}
}
