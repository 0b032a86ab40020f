package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serveChild runs the test binary as `superego serve` against the fake
// model, on the repository's flows, and waits until it listens.
func serveChild(t *testing.T, model *experimentModel, args ...string) *server {
	t.Helper()
	return launch(t, child(model, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...))
}

var vmRSSRe = regexp.MustCompile(`VmRSS:\s+(\d+) kB`)

// rss is a process's resident set now, in MiB.
func rss(t *testing.T, pid int) float64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc to read a process's memory in: %v", err)
	}
	m := vmRSSRe.FindSubmatch(status)
	kb, _ := strconv.ParseFloat(string(m[1]), 64)
	return kb / 1024
}

// postExperiment posts an experiment to a server, and returns its id.
func postExperiment(t *testing.T, s *server, doc string) string {
	t.Helper()
	resp, err := http.Post("http://"+s.addr+"/experiments", "application/json", strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var created struct {
		ID string `json:"experiment_id"`
	}
	json.NewDecoder(resp.Body).Decode(&created)
	if resp.StatusCode != 201 {
		t.Fatalf("POST /experiments: %d", resp.StatusCode)
	}
	return created.ID
}

// timed sends a request and returns its status and how long it took.
func timed(t *testing.T, method, url string) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err) // a server that does not answer in 10 s
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(start)
}

// The document: 16,000 inline samples × 20 conditions × 100
// repeats, 32,000,000 outcomes in an 850 KB request. Allowed to run, it
// runs in bounded memory, the server answers at once, cancel ends it, and
// a server that resumes it after a kill -9 stays bounded too. The plan
// used to be built whole before the first outcome: 16 GB in 25 s.
func TestAnExperimentOfAnySizeRunsInBoundedMemory(t *testing.T) {
	const bound = 400 // MiB; the race detector's shadow memory included
	model := newExperimentModel(t)
	model.open()
	var doc strings.Builder
	doc.WriteString(`{"name": "huge", "repeats": 100, "samples": [`)
	for i := range 16_000 {
		if i > 0 {
			doc.WriteByte(',')
		}
		fmt.Fprintf(&doc, `{"id":"s%d","input":"s%d: hello","label":"benign"}`, i, i)
	}
	doc.WriteString(`], "conditions": [`)
	for i := range 20 {
		if i > 0 {
			doc.WriteByte(',')
		}
		fmt.Fprintf(&doc, `{"name":"c%d","flow":"bare_assistant"}`, i)
	}
	doc.WriteString(`]}`)
	dir := t.TempDir()
	args := []string{"--db", filepath.Join(dir, "superego.db"), "--experiments", dir, "--workspaces", filepath.Join(dir, "ws"), "--max-outcomes", "0"}

	// watch samples the server's memory, and how soon it answers, for a
	// while.
	watch := func(s *server, d time.Duration) (peak float64) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			if peak = max(peak, rss(t, s.cmd.Process.Pid)); peak > bound {
				return peak
			}
			if code, took := timed(t, "GET", "http://"+s.addr+"/healthz"); code != 200 || took > 2*time.Second {
				t.Errorf("GET /healthz: %d in %s", code, took)
			}
		}
		return peak
	}
	s := serveChild(t, model, args...)
	base := rss(t, s.cmd.Process.Pid)
	id := postExperiment(t, s, doc.String())
	peak := watch(s, 4*time.Second)
	if peak > bound {
		t.Errorf("running: %.0f MiB resident at most (%.0f at the start)", peak, base)
	}
	// progress reads the experiment's status from the list, and its
	// progress from the first event of its stream: neither makes the
	// report, which GET /experiments/{id} of a running experiment does
	// from every outcome recorded.
	progress := func(s *server) (status string, done, total int) {
		var list []struct {
			ID     string `json:"experiment_id"`
			Status string `json:"status"`
		}
		resp, err := http.Get("http://" + s.addr + "/experiments")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if len(list) == 1 {
			status = list[0].Status
		}
		resp, err = http.Get("http://" + s.addr + "/experiments/" + id + "/events")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p struct{ Done, Total int }
		for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				json.Unmarshal([]byte(data), &p)
				break
			}
		}
		return status, p.Done, p.Total
	}
	if status, done, total := progress(s); status != "running" || done == 0 || total != 32_000_000 {
		t.Errorf("after 4 s: %s, %d of %d", status, done, total)
	}

	// kill -9, and a server that resumes it.
	s.cmd.Process.Signal(os.Kill)
	<-s.done
	s = serveChild(t, model, args...)
	again := watch(s, 3*time.Second)
	if again > bound {
		t.Errorf("resumed: %.0f MiB resident at most", again)
	}
	if code, took := timed(t, "POST", "http://"+s.addr+"/experiments/"+id+"/cancel"); code != 202 || took > 2*time.Second {
		t.Errorf("cancel: %d in %s", code, took)
	}
	status, done, _ := progress(s)
	if status != "cancelled" {
		t.Errorf("after cancel: %s", status)
	}
	t.Logf("32,000,000 outcomes: %.0f MiB resident at the start, %.0f at most running, %.0f resumed; %d outcomes done before the cancel", base, peak, again, done)
}

// The experiment limits' settings: the cap on outcomes, and who may start
// experiments, which is keys by default once the operator set keys or an
// admin token.
func TestExperimentLimitsConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args    []string
		env     []string
		max     int
		auth    string
		problem string
	}{
		{nil, nil, 100_000, "open", ""},
		{nil, []string{"SUPEREGO_API_KEYS", "k1"}, 100_000, "keys", ""},
		{nil, []string{"SUPEREGO_ADMIN_TOKEN", "t"}, 100_000, "keys", ""},
		{[]string{"--experiments-auth", "open"}, []string{"SUPEREGO_API_KEYS", "k1"}, 100_000, "open", ""},
		{[]string{"--max-outcomes", "0"}, []string{"SUPEREGO_MAX_OUTCOMES", "5", "SUPEREGO_EXPERIMENTS_AUTH", "admin", "SUPEREGO_ADMIN_TOKEN", "t"}, 0, "admin", ""},
		{nil, []string{"SUPEREGO_MAX_OUTCOMES", "5"}, 5, "open", ""},
		{[]string{"--max-outcomes", "-1"}, nil, 0, "", "max-outcomes"},
		{[]string{"--experiments-auth", "keys"}, nil, 0, "", "keys needs SUPEREGO_API_KEYS or SUPEREGO_ADMIN_TOKEN"},
		{[]string{"--experiments-auth", "admin"}, []string{"SUPEREGO_API_KEYS", "k1"}, 0, "", "admin needs SUPEREGO_ADMIN_TOKEN"},
		{[]string{"--experiments-auth", "anyone"}, nil, 0, "", "not open, keys or admin"},
	} {
		cfg, _, err := parseConfig("serve", c.args, env(c.env...), io.Discard)
		switch {
		case c.problem != "" && (err == nil || !strings.Contains(err.Error(), c.problem)):
			t.Errorf("%v %v: %v, want %q", c.args, c.env, err, c.problem)
		case c.problem == "" && (err != nil || cfg.MaxOutcomes != c.max || cfg.ExperimentsAuth != c.auth):
			t.Errorf("%v %v: %d %q %v", c.args, c.env, cfg.MaxOutcomes, cfg.ExperimentsAuth, err)
		}
	}
}
