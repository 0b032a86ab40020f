// Package experiments benchmarks experiments on a real server process:
// its wall time against the ideal, its peak RSS, and a counterfactual
// replay's model calls and wall time against a full re-run. The model is
// a fake OpenAI server (agentstest) in this process that answers every
// call after a fixed latency.
//
//	go test -run '^$' -bench . -benchtime 1x -count 5 ./bench/experiments
//
// Each iteration builds nothing and starts a fresh server on a fresh
// SQLite file; the binary is built once per process.
package experiments

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"superego/agents/agentstest"
	"superego/bench/internal/serving"
)

// model is the fake: every call is answered after latency. The input
// superego accepts with no guidance (so that guarded_chat's speculative
// assistant is adopted), the assistant answers, the reviewer accepts.
type model struct {
	*agentstest.Server
	latency atomic.Int64
	calls   atomic.Int64
	byNode  sync.Map // node → *atomic.Int64
}

func newModel(b *testing.B) *model {
	m := &model{}
	m.Server = agentstest.OpenAI(b, func(r agentstest.Request) agentstest.Answer {
		m.calls.Add(1)
		n, _ := m.byNode.LoadOrStore(r.Node(), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		a := agentstest.Reply("", "ACCEPT", "", "")
		if r.Node() == "assistant" {
			a = agentstest.Reply("", "COMPLETE", "", "Here is an answer to "+r.LastUser()+".")
		}
		a.Delay = time.Duration(m.latency.Load())
		return a
	})
	m.Server.Server.CloseClientConnections() // orders agentstest's setup before the server's requests
	return m
}

func (m *model) node(name string) int64 {
	n, ok := m.byNode.Load(name)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// build builds the superego binary once per process.
func build(b *testing.B) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "superego-bench")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "superego")
		out, err := exec.Command("go", "build", "-o", binary, "../../cmd/superego").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return binary
}

type server struct {
	cmd  *exec.Cmd
	addr string
}

// serve starts `superego serve` on a fresh SQLite file, its model the fake,
// its flows the shipped ones and guarded_sequential: guarded_chat without
// speculation, its three calls one after the other.
func serve(b *testing.B, m *model) *server {
	dir := b.TempDir()
	flows := filepath.Join(dir, "flows")
	if err := os.CopyFS(flows, os.DirFS("../../flows")); err != nil {
		b.Fatal(err)
	}
	guarded, err := os.ReadFile("../../flows/guarded_chat.json")
	if err != nil {
		b.Fatal(err)
	}
	sequential := strings.Replace(string(guarded), `"speculate": true,`, `"speculate": false,`, 1)
	if err := os.WriteFile(filepath.Join(flows, "guarded_sequential.json"), []byte(sequential), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(build(b), "serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "bench.db"),
		"--flows", flows, "--constitutions", "../../constitutions", "--experiments", dir, "--workspaces", filepath.Join(dir, "ws"))
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=k", "OPENAI_BASE_URL="+m.URL+"/v1", "SUPEREGO_MODEL=openai:bench")
	cmd.Stderr = io.Discard
	addr, err := serving.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return &server{cmd: cmd, addr: addr}
}

// peakRSS is the server's peak resident set, in MiB (VmHWM).
func (s *server) peakRSS(b *testing.B) float64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	m := regexp.MustCompile(`VmHWM:\s+(\d+) kB`).FindSubmatch(status)
	kb, _ := strconv.ParseFloat(string(m[1]), 64)
	return kb / 1024
}

func (s *server) post(b *testing.B, path, body string) map[string]any {
	resp, err := http.Post("http://"+s.addr+path, "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		b.Fatalf("POST %s: %d %s", path, resp.StatusCode, out)
	}
	var v map[string]any
	json.Unmarshal(out, &v)
	return v
}

// wait follows the experiment's events to its done, and returns it.
func (s *server) wait(b *testing.B, id string) string {
	resp, err := http.Get("http://" + s.addr + "/experiments/" + id + "/events")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "event: done" {
			done = true
		}
		if done && strings.HasPrefix(line, "data: ") {
			return line[6:]
		}
	}
	b.Fatalf("the events of %s ended without done", id)
	return ""
}

func samples(n int) string {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i := range n {
		if i > 0 {
			buf.WriteByte(',')
		}
		label := "harmful"
		if i%2 == 1 {
			label = "benign"
		}
		fmt.Fprintf(&buf, `{"id": "s%d", "input": "Sample %d: tell me about topic %d.", "label": %q}`, i, i, i, label)
	}
	buf.WriteByte(']')
	return buf.String()
}

const latency = 200 * time.Millisecond

// BenchmarkExperiment runs 2,000 outcomes of guarded_chat at concurrency 64
// on a model that answers after 200 ms. guarded_chat makes three calls an
// outcome, but its input superego and its assistant run at once
// (speculation): two calls' time an outcome. The ideal is the brief's,
// outcomes × calls × 200 ms / 64 = 18.75 s, and the one speculation allows,
// outcomes × 2 × 200 ms / 64 = 12.5 s.
func BenchmarkExperiment(b *testing.B) {
	const outcomes, concurrency = 2000, 64
	m := newModel(b)
	m.latency.Store(int64(latency))
	doc := fmt.Sprintf(`{"name": "bench", "samples": %s, "conditions": [{"name": "guarded", "flow": "guarded_chat"}], "concurrency": %d}`, samples(outcomes), concurrency)
	for range b.N {
		s := serve(b, m)
		calls := m.calls.Load()
		start := time.Now()
		id := s.post(b, "/experiments", doc)["experiment_id"].(string)
		done := s.wait(b, id)
		wall := time.Since(start).Seconds()
		if !strings.Contains(done, `"status":"completed"`) || !strings.Contains(done, fmt.Sprintf(`"done":%d`, outcomes)) || !strings.Contains(done, `"errors":0`) {
			b.Fatalf("done: %s", done)
		}
		made := m.calls.Load() - calls
		ideal := float64(outcomes) * 3 * latency.Seconds() / concurrency
		critical := float64(outcomes) * 2 * latency.Seconds() / concurrency
		b.ReportMetric(wall, "wall_s")
		b.ReportMetric(wall/ideal, "x_ideal_3calls")
		b.ReportMetric(wall/critical, "x_ideal_2calls")
		b.ReportMetric(s.peakRSS(b), "peak_rss_MiB")
		b.ReportMetric(float64(made)/outcomes, "calls/outcome")
		s.cmd.Process.Kill()
	}
}

// BenchmarkReplay replays 1,000 recorded runs of guarded_chat under another
// constitution for its input superego (privacy, under which the fake still
// accepts: every path stays the record's), against a full re-run of the
// same condition on a fresh server, at concurrency 64, 200 ms a call.
func BenchmarkReplay(b *testing.B) {
	const outcomes, concurrency = 1000, 64
	m := newModel(b)
	set := samples(outcomes)
	for range b.N {
		// Record, on a fast model: not measured.
		m.latency.Store(0)
		s := serve(b, m)
		id := s.post(b, "/experiments", fmt.Sprintf(`{"name": "record", "samples": %s, "conditions": [{"name": "guarded", "flow": "guarded_chat"}], "concurrency": %d}`, set, concurrency))["experiment_id"].(string)
		s.wait(b, id)
		m.latency.Store(int64(latency))

		// The replay.
		calls, input := m.calls.Load(), m.node("input_superego")
		start := time.Now()
		s.post(b, "/experiments/"+id+"/replay", `{"from": "guarded", "as": "privacy", "constitutions": {"input_superego": "privacy"}}`)
		if done := s.wait(b, id); !strings.Contains(done, `"status":"completed"`) || !strings.Contains(done, `"errors":0`) {
			b.Fatalf("replay: %s", done)
		}
		replayWall := time.Since(start).Seconds()
		replayCalls, replayInput := m.calls.Load()-calls, m.node("input_superego")-input
		s.cmd.Process.Kill()

		// The full re-run, on a fresh server: no reply cache.
		f := serve(b, m)
		calls = m.calls.Load()
		start = time.Now()
		full := f.post(b, "/experiments", fmt.Sprintf(`{"name": "full", "samples": %s, "conditions": [{"name": "privacy", "flow": "guarded_chat", "constitutions": {"input_superego": "privacy"}}], "concurrency": %d}`, set, concurrency))["experiment_id"].(string)
		if done := f.wait(b, full); !strings.Contains(done, `"status":"completed"`) {
			b.Fatalf("full re-run: %s", done)
		}
		fullWall := time.Since(start).Seconds()
		fullCalls := m.calls.Load() - calls
		f.cmd.Process.Kill()

		// For scale: the same re-run without speculation, three calls in a
		// row, as the brief's ideal counts them.
		q := serve(b, m)
		start = time.Now()
		seq := q.post(b, "/experiments", fmt.Sprintf(`{"name": "sequential", "samples": %s, "conditions": [{"name": "privacy", "flow": "guarded_sequential", "constitutions": {"input_superego": "privacy"}}], "concurrency": %d}`, set, concurrency))["experiment_id"].(string)
		q.wait(b, seq)
		seqWall := time.Since(start).Seconds()
		q.cmd.Process.Kill()

		if replayCalls != replayInput || replayCalls != outcomes {
			b.Errorf("the replay made %d calls, %d of them the input superego's: want exactly %d, the superego's", replayCalls, replayInput, outcomes)
		}
		b.ReportMetric(replayWall, "replay_wall_s")
		b.ReportMetric(fullWall, "full_wall_s")
		b.ReportMetric(replayWall/fullWall, "x_full_wall")
		b.ReportMetric(seqWall, "sequential_wall_s")
		b.ReportMetric(replayWall/seqWall, "x_sequential_wall")
		b.ReportMetric(float64(replayCalls), "replay_calls")
		b.ReportMetric(float64(fullCalls), "full_calls")
	}
}
