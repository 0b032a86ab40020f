package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The README's refusal is real: its curl, sent as it is to a server on the
// offline model with the shipped flows, answers what the README shows, the
// deny rule refuses the write, and the workspace holds no file; the same
// request writing under notes/ writes it.
func TestTheReadmesRefusal(t *testing.T) {
	readme := read(t, "../../README.md")
	_, after, _ := strings.Cut(readme, "## A refusal, with no language model\n")
	blocks := regexp.MustCompile("(?s)```[a-z]*\n(.*?)```").FindAllStringSubmatch(after, 2)
	if len(blocks) < 2 {
		t.Fatal("the README's refusal has no curl and answer")
	}
	curl, shown := strings.ReplaceAll(blocks[0][1], "\\\n", " "), blocks[1][1]
	path := regexp.MustCompile(`localhost:8080(/\S+)`).FindStringSubmatch(curl)
	body := regexp.MustCompile(`-d '([^']*)'`).FindStringSubmatch(curl)
	headers := regexp.MustCompile(`-H '([^:']*): ([^']*)'`).FindAllStringSubmatch(curl, -1)
	if path == nil || body == nil || len(headers) == 0 {
		t.Fatalf("the README's curl does not read as a request:\n%s", curl)
	}

	workspaces := t.TempDir()
	cfg, _, err := parseConfig("serve", []string{"--addr", "127.0.0.1:0", "--flows", "../../flows", "--constitutions", "../../constitutions",
		"--db", "memory", "--workspaces", workspaces, "--model", "offline"}, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, served := make(chan string, 1), make(chan error, 1)
	go func() { served <- serve(ctx, cfg, io.Discard, io.Discard, ready) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-served:
		case <-time.After(30 * time.Second):
			t.Error("serve did not return")
		}
	})
	var addr string
	select {
	case addr = <-ready:
	case err := <-served:
		t.Fatalf("serve: %v", err)
	}
	send := func(body string) (string, answerOf) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+addr+path[1], strings.NewReader(body))
		for _, h := range headers {
			req.Header.Set(h[1], h[2])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var a answerOf
		if err := json.Unmarshal(b, &a); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s: %v", resp.StatusCode, b, err)
		}
		return string(b), a
	}

	answer, a := send(body[1])
	// The README shows the answer with parts left out (…): each part it
	// shows is the answer's, in order.
	at := 0
	for _, part := range strings.Split(strings.Join(trimmed(shown), ""), "…") {
		i := strings.Index(answer[at:], part)
		if i < 0 {
			t.Errorf("the README shows %q, which the answer does not have there:\n%s", part, answer)
			break
		}
		at += i + len(part)
	}
	use := a.call(t, "write_file")
	if a.Status != "completed" || !use.Refused || !strings.HasPrefix(use.JudgedBy.Rule, "deny: write_file(") || use.Input["path"] != ".env" {
		t.Errorf("not refused by the deny rule: %s", answer)
	}
	if files := filesIn(t, workspaces); len(files) > 0 {
		t.Errorf("the refused write wrote %v", files)
	}
	if strings.Contains(answer, "does not reason") || strings.Contains(answer, "no guidance") {
		t.Errorf("the answer carries a hidden field: %s", answer)
	}

	// The control: under notes/, the allow rule lets the same call run.
	answer, a = send(strings.Replace(body[1], "path=.env", "path=notes/todo.md", 1))
	use = a.call(t, "write_file")
	if use.Refused || use.JudgedBy.Rule != "allow: write_file(path=notes/**)" {
		t.Errorf("the write under notes/ was not let through by the allow rule: %s", answer)
	}
	if b, err := os.ReadFile(filepath.Join(workspaces, a.InstanceID, "notes", "todo.md")); err != nil || string(b) != "API_KEY=secret" {
		t.Errorf("notes/todo.md: %q, %v; the workspace holds %v", b, err, filesIn(t, workspaces))
	}
}

// answerOf is what of /flow/execute's JSON answer the test reads.
type answerOf struct {
	InstanceID string `json:"instance_id"`
	Status     string `json:"status"`
	Steps      []struct {
		ToolUsage []toolUseOf `json:"tool_usage"`
	} `json:"steps"`
}

type toolUseOf struct {
	ToolName string            `json:"tool_name"`
	Input    map[string]string `json:"input"`
	Refused  bool              `json:"refused"`
	JudgedBy struct {
		Rule string `json:"rule"`
	} `json:"judged_by"`
}

// call is the run's one call of the tool.
func (a answerOf) call(t *testing.T, tool string) (use toolUseOf) {
	t.Helper()
	n := 0
	for _, s := range a.Steps {
		for _, u := range s.ToolUsage {
			if u.ToolName == tool {
				use, n = u, n+1
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d calls of %s in the run, want 1", n, tool)
	}
	return use
}

func trimmed(text string) []string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return lines
}

// filesIn lists the files under dir.
func filesIn(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
