package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// SUPEREGO_API_KEYS_FILE gives each key its user's stack: the server
// refuses to start on a file that names a constitution the library does
// not have (never naming the key), and once started, a key's stack
// reaches the judges on /flow/execute and on /v1, where the file's keys
// are required as SUPEREGO_API_KEYS' are.
func TestKeysFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	start := func(keysFile string) (string, func() error, error) {
		cfg, _, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--flows", "../../flows", "--constitutions", "../../constitutions", "--db", "memory"},
			env("SUPEREGO_API_KEYS_FILE", keysFile), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan string, 1)
		served := make(chan error, 1)
		go func() { served <- serve(ctx, cfg, io.Discard, io.Discard, ready) }()
		select {
		case addr := <-ready:
			return addr, func() error { cancel(); return <-served }, nil
		case err := <-served:
			cancel()
			return "", nil, err
		}
	}

	for _, c := range []struct{ name, file, want string }{
		{"an unknown constitution", `{"sk-secret-1": {"user": "bob", "constitutions": [{"name": "veganism"}]}}`, `the key of user "bob": constitutions[0].name: unknown constitution "veganism"`},
		{"a level of 6", `{"sk-secret-1": {"user": "bob", "constitutions": [{"name": "vegan", "adherence": 6}]}}`, `constitutions[0].adherence: must be 1 to 5, not 6`},
		{"no key", `{}`, "it has no key"},
		{"not JSON", `sk-secret-1`, "not a JSON object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := start(write("bad.json", c.file))
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "sk-secret") {
				t.Errorf("start: %v; want it to say %q, and never the key", err, c.want)
			}
		})
	}
	if _, _, err := start(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("a keys file that does not exist: the server started")
	}

	addr, stop, err := start(write("keys.json", `{"sk-parent-1": {"user": "family", "constitutions": [{"name": "child_safe", "adherence": 5}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, body, key string) (int, string) {
		req, _ := http.NewRequest("POST", "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	stack := `"stack":[{"name":"floor"},{"name":"child_safe","adherence":5},{"name":"vegan","adherence":3}],"basis":"floor"`
	if code, b := post("/flow/execute", `{"flow_id": "basic_calculator", "input": "What is 5*10?", "constitutions": [{"name": "vegan"}]}`, "sk-parent-1"); code != 200 || !strings.Contains(b, stack) {
		t.Errorf("/flow/execute with the key: %d %s", code, b)
	}
	if code, b := post("/flow/execute", `{"flow_id": "basic_calculator", "input": "What is 5*10?"}`, ""); code != 200 || strings.Contains(b, `"stack"`) {
		t.Errorf("/flow/execute with no key: %d %s", code, b)
	}
	chat := `{"model": "basic_calculator", "messages": [{"role": "user", "content": "What is 5*10?"}]}`
	if code, b := post("/v1/chat/completions", chat, ""); code != 401 {
		t.Errorf("/v1 with no key: %d %s", code, b)
	}
	if code, b := post("/v1/chat/completions", chat, "sk-parent-1"); code != 200 {
		t.Errorf("/v1 with the key: %d %s", code, b)
	}
	done := make(chan error, 1)
	go func() { done <- stop() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after shutdown")
	}
}

// The shipped stacks experiment runs the refusal sample under two stacks
// on the offline model, and replays the first under a third from the
// command line: only the superegos are asked again, every assistant step
// reused, and the report counts decisions by basis, as docs/stacks.md shows.
func TestStacksExperimentOffline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	getenv := env("SUPEREGO_FLOWS", "../../flows", "SUPEREGO_CONSTITUTIONS", "../../constitutions", "SUPEREGO_DB", filepath.Join(dir, "s.db"))
	code, out, errs := runCmd(t, getenv, "experiment", "run", "../../experiments/refusal_sample_stacks.json", "--out", filepath.Join(dir, "out"))
	if code != 0 {
		t.Fatalf("run: %d\n%s\n%s", code, out, errs)
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(out, "experiment "), "\n")
	code, out, errs = runCmd(t, getenv, "experiment", "replay", id, "--from", "vegan", "--as", "compliance", "--stack", "no_financial_advice:4,medical_caution:2", "--out", filepath.Join(dir, "replayed"))
	if code != 0 || !strings.Contains(out, "condition compliance replays vegan, asking input_superego, output_superego again") {
		t.Fatalf("replay: %d\n%s\n%s", code, out, errs)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "replayed", "report.md"))
	for _, want := range []string{
		"| vegan | guarded_chat, stack vegan 4 | 0/32 0.0% [0.0%, 10.7%] |",
		"| family | guarded_chat, stack child_safe 5 + medical_caution 3 | 0/32 0.0% [0.0%, 10.7%] |",
		"| compliance | guarded_chat, stack no_financial_advice 4 + medical_caution 2, replay of vegan | 0/32 0.0% [0.0%, 10.7%] |",
		"## Decisions by basis",
		"| vegan | input_superego | floor | ACCEPT 64 |",
		"| family | output_superego | floor | ACCEPT 64 |",
		"| compliance | input_superego | floor | ACCEPT 64 |",
		"64 steps reused by replays",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	// docs/stacks.md shows this report: each of its table rows is the
	// report's own.
	readmeShows(t, "```\n# refusal-sample-stacks\n", string(md), 10)
	code, _, errs = runCmd(t, getenv, "experiment", "replay", id, "--from", "vegan", "--as", "x", "--stack", "vegan:high")
	if code != exitUsage || !strings.Contains(errs, `--stack "vegan:high": [0].adherence: must be a whole number`) {
		t.Errorf("a --stack that does not read: %d %s", code, errs)
	}
}
