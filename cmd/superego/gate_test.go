package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"superego/agents/agentstest"
	"superego/flow"
)

// draftMarker is in the calculator's draft: where a superego withholds the
// draft, no client path may show it.
const draftMarker = "DRAFT-0b7e"

// judgeAtGate answers the calc flow; the named node's call waits at its
// gate, and the output superego decides verdict.
type judgeAtGate struct {
	waiting string        // the node whose call waits
	entered chan struct{} // that call arrived
	asked   chan string   // every call's node, as it arrives
	gate    chan struct{}
	once    sync.Once

	mu      sync.Mutex
	verdict string
	calls   map[string]int
}

func newJudgeAtGate(t *testing.T, waiting, verdict string) (*judgeAtGate, *gatedModel) {
	j := &judgeAtGate{waiting: waiting, verdict: verdict, entered: make(chan struct{}, 10), asked: make(chan string, 100), gate: make(chan struct{}), calls: map[string]int{}}
	srv := agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		node := r.Node()
		j.mu.Lock()
		j.calls[node]++
		j.mu.Unlock()
		j.asked <- node
		if node == j.waiting {
			j.entered <- struct{}{}
			<-j.gate
		}
		switch node {
		case "input_superego":
			return agentstest.Reply("HIDDEN-THINKING", "ACCEPT", "", "")
		case "calculator":
			if res := r.ToolResults(); len(res) > 0 {
				return agentstest.Reply("t", "COMPLETE", "HIDDEN-GUIDANCE", draftMarker+": 6*7 = "+res[0].Text)
			}
			return agentstest.Answer{ToolCalls: []agentstest.Call{{ID: "call_1", Name: "calculator", Args: `{"expression":"6*7"}`}}}
		case "output_superego":
			j.mu.Lock()
			defer j.mu.Unlock()
			if j.verdict == "BLOCK" {
				return agentstest.Reply("HIDDEN-THINKING", "BLOCK", "HIDDEN-GUIDANCE", "Not sent.")
			}
			return agentstest.Reply("HIDDEN-THINKING", "ACCEPT", "", "")
		}
		return agentstest.Answer{Status: 400, Text: "unknown node"}
	})
	return j, &gatedModel{Server: srv}
}

func (j *judgeAtGate) open() { j.once.Do(func() { close(j.gate) }) }

func (j *judgeAtGate) count(node string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.calls[node]
}

// killWhile starts a run, kills the server with -9 once waiting's call has
// arrived, and restarts it with the gate open; it returns the instance's
// whole log as the second server has it, and that server.
func killWhile(t *testing.T, dir string, j *judgeAtGate, model *gatedModel) ([]logEvent, *server) {
	t.Helper()
	first := startServer(t, dir, model)
	id := startRun(t, first.addr)
	<-j.entered
	first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	j.open()
	second := startServer(t, dir, model)
	return history(t, second.addr, id), second
}

func steps(events []logEvent) []flow.Step {
	var out []flow.Step
	for _, e := range events {
		if e.name == "complete_step" {
			var s flow.Step
			json.Unmarshal([]byte(e.data), &s)
			out = append(out, s)
		}
	}
	return out
}

func trace(steps []flow.Step) string {
	var t []string
	for _, s := range steps {
		t = append(t, s.StepID+":"+s.AgentID+":"+s.Decision+":"+s.Withheld)
	}
	return strings.Join(t, " ")
}

// A crash while a draft is held: the restarted server judges it again, and
// releases or withholds it by that judgement; no client saw it before.
func TestKillNineWhileHeldJudgesAgain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		verdict, trace, status string
	}{
		{"ACCEPT", "1:user:: 2:input_superego:ACCEPT: 3:calculator:NEEDS_TOOL: 4:calculator:COMPLETE: 5:output_superego:ACCEPT:", "completed"},
		{"BLOCK", "1:user:: 2:input_superego:ACCEPT: 3:calculator:NEEDS_TOOL:output_superego 4:calculator:COMPLETE:output_superego 5:output_superego:BLOCK:", "blocked"},
	} {
		t.Run(c.verdict, func(t *testing.T) {
			dir := writeFlows(t)
			j, model := newJudgeAtGate(t, "output_superego", c.verdict)
			events, second := killWhile(t, dir, j, model)
			if got := trace(steps(events)); got != c.trace {
				t.Errorf("steps\n %s\nwant\n %s", got, c.trace)
			}
			if last := events[len(events)-1]; last.name != "done" || !strings.Contains(last.data, `"status":"`+c.status+`"`) {
				t.Errorf("last event %+v", last)
			}
			if n := j.count("output_superego"); n != 2 {
				t.Errorf("the judge was asked %d times, want twice: before the crash and after", n)
			}
			all := ""
			for _, e := range events {
				all += e.data
			}
			if c.verdict == "BLOCK" && strings.Contains(all, draftMarker) {
				t.Errorf("the withheld draft is in the log a client reads:\n%s", all)
			}
			if c.verdict == "ACCEPT" && !strings.Contains(all, draftMarker) {
				t.Error("the accepted draft never went out")
			}
			second.cmd.Process.Signal(syscall.SIGTERM)
			<-second.done
			db := env("SUPEREGO_DB", filepath.Join(dir, "superego.db"))
			_, out, _ := runCmd(t, db, "export")
			_, full, _ := runCmd(t, db, "export", "--include-hidden")
			if c.verdict == "BLOCK" && (strings.Contains(out, draftMarker) || !strings.Contains(full, draftMarker)) {
				t.Errorf("export shows the withheld draft, or export --include-hidden lacks it:\n%s\n%s", out, full)
			}
		})
	}
}

// A crash while the input superego's verdict is pending, with the
// calculator running ahead of it: the restarted run goes on as if
// speculation had not started, and nothing of the speculative turn was
// ever recorded.
func TestKillNineDuringSpeculation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "flows"), 0o755)
	speculative := strings.Replace(durableFlow, `"constitution": "Judge.",`, `"constitution": "Judge.", "speculate": true,`, 1)
	if err := os.WriteFile(filepath.Join(dir, "flows", "calc.json"), []byte(speculative), 0o644); err != nil {
		t.Fatal(err)
	}
	j, model := newJudgeAtGate(t, "input_superego", "ACCEPT")
	first := startServer(t, dir, model)
	id := startRun(t, first.addr)
	<-j.entered
	// The calculator runs ahead, tool call and answer, while the judge waits.
	for n := 0; n < 2; {
		if <-j.asked == "calculator" {
			n++
		}
	}
	resp, err := http.Get("http://" + first.addr + "/flow/instances/" + id)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(before), "calculator") || !strings.Contains(string(before), `"status":"running"`) {
		t.Errorf("the instance before the verdict: %s", before)
	}
	first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	j.open()
	second := startServer(t, dir, model)
	events := history(t, second.addr, id)
	want := "1:user:: 2:input_superego:ACCEPT: 3:calculator:NEEDS_TOOL: 4:calculator:COMPLETE: 5:output_superego:ACCEPT:"
	if got := trace(steps(events)); got != want {
		t.Errorf("steps\n %s\nwant\n %s", got, want)
	}
	if last := events[len(events)-1]; last.name != "done" || !strings.Contains(last.data, `"status":"completed"`) {
		t.Errorf("last event %+v", last)
	}
}
