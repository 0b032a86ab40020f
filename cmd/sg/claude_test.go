package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"superego/agents/agentstest"
)

// TestClaudeCode drives the real Claude Code CLI (npm
// @anthropic-ai/claude-code, headless: claude -p … --output-format json),
// named by SUPEREGO_CLAUDE, in scratch git projects after sg init && sg
// hooks --install. Its API traffic goes to fakeAnthropic, which scripts the
// model's tool calls; sg's judge is an OpenAI fake that decides the phase
// from a marker in the user's prompt. Nothing reaches the network, and no
// key is needed.
func TestClaudeCode(t *testing.T) {
	t.Parallel()
	claude := os.Getenv("SUPEREGO_CLAUDE")
	if claude == "" {
		t.Skip("skipped: SUPEREGO_CLAUDE is not set; it names the Claude Code CLI (npm install @anthropic-ai/claude-code), which .ci/run installs and sets")
	}
	out, err := exec.Command(claude, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", claude, err)
	}
	t.Logf("Claude Code %s", strings.TrimSpace(string(out)))
	c := &claudeCode{claude: claude, bin: binaries(t), judge: agentstest.OpenAI(t, judgeByMarker)}

	for _, run := range []struct {
		name  string
		flags []string
	}{{"", nil}, {", without a transcript (--no-session-persistence)", []string{"--no-session-persistence"}}} {
		flags := run.flags
		t.Run("a new session's Write is denied in EXPLORING"+run.name, func(t *testing.T) {
			s := c.start(t, func(dir string) map[string][]modelTurn {
				return map[string][]modelTurn{"[exploring] write notes": {{tools: []toolCall{write("toolu_notes", dir+"/notes.md", "notes\n")}}}}
			})
			res := s.run("[exploring] write notes", flags...)
			s.denied("toolu_notes", Exploring)
			if s.exists("notes.md") {
				t.Error("notes.md was written")
			}
			if len(res.PermissionDenials) != 1 || res.PermissionDenials[0].ToolName != "Write" {
				t.Errorf("permission denials: %+v", res.PermissionDenials)
			}
			// Without persistence Claude Code never writes the transcript.
			transcripts, _ := filepath.Glob(filepath.Join(s.home, ".claude", "projects", "*", res.SessionID+".jsonl"))
			if (flags == nil) == (len(transcripts) == 0) {
				t.Errorf("transcripts %v, with flags %v", transcripts, flags)
			}
		})
	}

	t.Run("a new session after a READY one starts in EXPLORING; a resumed one keeps its phase", func(t *testing.T) {
		s := c.start(t, func(dir string) map[string][]modelTurn {
			return map[string][]modelTurn{
				"[ready] write a.txt": {{tools: []toolCall{write("toolu_a", dir+"/a.txt", "a\n")}}},
				"now b.txt":           {{tools: []toolCall{write("toolu_b", dir+"/b.txt", "b\n")}}},
				"resumed: c.txt":      {{tools: []toolCall{write("toolu_c", dir+"/c.txt", "c\n")}}},
			}
		})
		first := s.run("[ready] write a.txt")
		s.allowed("toolu_a")
		// No marker: the judge keeps the phase sg says the session was in.
		if second := s.run("now b.txt"); second.SessionID == first.SessionID {
			t.Fatal("the second run was not a new session")
		}
		s.denied("toolu_b", Exploring)
		s.run("resumed: c.txt", "--resume", first.SessionID)
		s.allowed("toolu_c")
		for file, want := range map[string]bool{"a.txt": true, "b.txt": false, "c.txt": true} {
			if s.exists(file) != want {
				t.Errorf("%s written: %v, want %v", file, !want, want)
			}
		}
		for _, r := range c.judge.Requests() {
			if msg := r.LastUser(); strings.Contains(msg, "now b.txt") && !strings.Contains(msg, "The phase so far: EXPLORING; the session has just begun.") {
				t.Errorf("the new session was judged from:\n%s", msg)
			}
		}
	})

	t.Run("an Agent call is gated", func(t *testing.T) {
		s := c.start(t, func(dir string) map[string][]modelTurn {
			return map[string][]modelTurn{"[exploring] ask an agent": {{tools: []toolCall{agent("toolu_agent", "SUBAGENT-NEVER: write x.txt")}}}}
		})
		s.run("[exploring] ask an agent")
		s.denied("toolu_agent", Exploring)
		if s.api.answered("SUBAGENT-NEVER") {
			t.Error("the subagent ran")
		}
	})

	t.Run("a subagent's Write is gated by its session's phase", func(t *testing.T) {
		s := c.start(t, func(dir string) map[string][]modelTurn {
			return map[string][]modelTurn{
				"[exploring] delegate": {{tools: []toolCall{agent("toolu_delegate", "SUBAGENT-WRITES: write sub.txt")}}},
				"SUBAGENT-WRITES":      {{tools: []toolCall{write("toolu_sub", dir+"/sub.txt", "sub\n")}}, {text: "I could not write sub.txt."}},
			}
		})
		s.sg("override", "the user lets the agent start") // the Agent call is the one write it lets through
		s.run("[exploring] delegate")
		s.allowed("toolu_delegate")
		s.denied("toolu_sub", Exploring)
		if s.exists("sub.txt") {
			t.Error("the subagent wrote sub.txt")
		}
		var subagent []auditLine
		for _, a := range s.audit() {
			if a.Command == "check" && a.Inputs["agent_id"] != "" {
				subagent = append(subagent, a)
			}
		}
		if len(subagent) != 1 || subagent[0].Decision != "deny" || subagent[0].Inputs["tool_name"] != "Write" {
			t.Errorf("the subagent's checks: %+v", subagent)
		}
		for _, r := range c.judge.Requests() {
			if strings.Contains(r.LastUser(), "<task-notification>") {
				t.Error("the judge was asked about a background task's end, as if the user had said it")
			}
		}
	})

	t.Run("after cd sub in Bash, a READY write goes through", func(t *testing.T) {
		s := c.start(t, func(dir string) map[string][]modelTurn {
			return map[string][]modelTurn{"[ready] cd sub first": {
				{tools: []toolCall{{id: "toolu_cd", name: "Bash", input: map[string]string{"command": "cd sub", "description": "Go to sub"}}}},
				{tools: []toolCall{write("toolu_impl", dir+"/sub/impl.txt", "impl\n")}},
			}}
		})
		s.run("[ready] cd sub first")
		s.allowed("toolu_cd")
		s.allowed("toolu_impl")
		if !s.exists("sub/impl.txt") {
			t.Error("sub/impl.txt was not written")
		}
		lines := s.audit()
		if last := lines[len(lines)-1]; last.Command != "check" || last.Decision != "allow" || last.Inputs["cwd"] != filepath.Join(s.dir, "sub") {
			t.Errorf("the write's check, after cd sub: %+v", last)
		}
	})

	t.Run("advise mode lets the write through and tells Claude the phase", func(t *testing.T) {
		s := c.start(t, func(dir string) map[string][]modelTurn {
			return map[string][]modelTurn{"[discussing] advise": {{tools: []toolCall{write("toolu_advised", dir+"/advised.txt", "advised\n")}}}}
		})
		config := filepath.Join(s.dir, ".superego", "config.yaml")
		b, _ := os.ReadFile(config)
		if err := os.WriteFile(config, bytes.Replace(b, []byte("\nmode: gate\n"), []byte("\nmode: advise\n"), 1), 0o644); err != nil {
			t.Fatal(err)
		}
		s.run("[discussing] advise")
		s.allowed("toolu_advised")
		if !s.exists("advised.txt") {
			t.Error("advised.txt was not written")
		}
		advice := "superego (advise): the conversation is in phase DISCUSSING, not READY. Which file to write is still open."
		if !strings.Contains(s.api.first("[discussing] advise"), advice) {
			t.Errorf("the UserPromptSubmit advice did not reach the model's first request")
		}
		if next := s.api.afterResult("toolu_advised"); !strings.Contains(next, advice) {
			t.Errorf("the PreToolUse advice did not reach the model with the Write's result: %q", next)
		}
	})

	t.Run("an override lets exactly one write through", func(t *testing.T) {
		s := c.start(t, func(dir string) map[string][]modelTurn {
			return map[string][]modelTurn{"[exploring] two files": {
				{tools: []toolCall{write("toolu_one", dir+"/one.txt", "1\n"), write("toolu_two", dir+"/two.txt", "2\n")}},
				{tools: []toolCall{write("toolu_three", dir+"/three.txt", "3\n")}},
			}}
		})
		s.sg("override", "the user approved one write")
		s.run("[exploring] two files")
		written := 0
		for _, f := range []string{"one.txt", "two.txt", "three.txt"} {
			if s.exists(f) {
				written++
			}
		}
		_, oneDenied, _ := s.api.toolResult("toolu_one")
		_, twoDenied, _ := s.api.toolResult("toolu_two")
		if written != 1 || oneDenied == twoDenied {
			t.Errorf("%d files written; one denied %v, two denied %v", written, oneDenied, twoDenied)
		}
		s.denied("toolu_three", Exploring)
	})
}

// claudeCode is what the subtests share: the CLI, sg, and sg's judge.
type claudeCode struct {
	claude string // the CLI
	bin    string // sg and sg-judge, first on the hooks' PATH
	judge  *agentstest.Server
}

// scratch is one subtest's project, Claude Code's HOME and the fake API.
type scratch struct {
	*claudeCode
	tb        testing.TB
	dir, home string
	api       *fakeAnthropic
}

// claudeResult is claude -p's JSON output.
type claudeResult struct {
	SessionID         string `json:"session_id"`
	IsError           bool   `json:"is_error"`
	Result            string `json:"result"`
	PermissionDenials []struct {
		ToolName  string `json:"tool_name"`
		ToolUseID string `json:"tool_use_id"`
	} `json:"permission_denials"`
}

var phaseSoFar = regexp.MustCompile(`The phase so far: ([A-Z]+)`)

// judgeByMarker is sg's judge in these tests: a marker in the user's new
// message decides the phase; without one, the phase stays what sg says it
// was, as a real judge would for "and now the next file".
func judgeByMarker(r agentstest.Request) agentstest.Answer {
	msg := r.LastUser()
	if _, after, ok := strings.Cut(msg, "The user's new message, which decides the phase:"); ok {
		switch {
		case strings.Contains(after, "[ready]"):
			return agentstest.Reply(thinkingMarker, Ready, guidanceMarker, "Write the files the user asked for.")
		case strings.Contains(after, "[discussing]"):
			return agentstest.Reply(thinkingMarker, Discussing, guidanceMarker, "Which file to write is still open.")
		case strings.Contains(after, "[exploring]"):
			return agentstest.Reply(thinkingMarker, Exploring, guidanceMarker, "The user is still looking around.")
		}
	}
	phase := phaseSoFar.FindStringSubmatch(msg)
	if phase == nil {
		return agentstest.Answer{Status: 400, Text: "no phase so far in the judge's input"}
	}
	return agentstest.Reply(thinkingMarker, phase[1], guidanceMarker, "Nothing new decides the phase.")
}

func write(id, path, content string) toolCall {
	return toolCall{id: id, name: "Write", input: map[string]string{"file_path": path, "content": content}}
}

func agent(id, prompt string) toolCall {
	return toolCall{id: id, name: "Agent", input: map[string]string{"description": "A task", "prompt": prompt, "subagent_type": "general-purpose"}}
}

// start makes a scratch git project with sg installed, a HOME of its own
// for Claude Code, and a fake API with the scripts for the project.
func (c *claudeCode) start(tb testing.TB, scripts func(dir string) map[string][]modelTurn) *scratch {
	tb.Helper()
	s := &scratch{claudeCode: c, tb: tb, dir: tb.TempDir(), home: tb.TempDir()}
	if err := os.Mkdir(filepath.Join(s.dir, "sub"), 0o755); err != nil {
		tb.Fatal(err)
	}
	if git, err := exec.LookPath("git"); err == nil {
		s.command(git, "init", "-q")
	}
	s.sg("init")
	s.sg("hooks", "--install")
	s.api = newFakeAnthropic(tb, scripts(s.dir))
	return s
}

// sg runs sg in the project, as the user would in a terminal.
func (s *scratch) sg(args ...string) {
	s.tb.Helper()
	s.command(filepath.Join(s.bin, "sg"), args...)
}

func (s *scratch) command(name string, args ...string) {
	s.tb.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = s.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		s.tb.Fatalf("%s %v: %v\n%s", filepath.Base(name), args, err, out)
	}
}

// run runs claude -p in the project and returns its result.
func (s *scratch) run(prompt string, flags ...string) claudeResult {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.claude, append([]string{"-p", prompt, "--output-format", "json"}, flags...)...)
	cmd.Dir = s.dir
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = []string{
		"PATH=" + s.bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + s.home,
		"TMPDIR=" + os.TempDir(),
		"ANTHROPIC_BASE_URL=" + s.api.URL,
		"ANTHROPIC_API_KEY=" + s.api.key,
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		// The hooks inherit these: sg's judge.
		"SUPEREGO_MODEL=openai:judge",
		"OPENAI_API_KEY=k",
		"OPENAI_BASE_URL=" + s.judge.URL + "/v1",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var res claudeResult
	if err == nil {
		err = json.Unmarshal(stdout.Bytes(), &res)
	}
	if err != nil || res.IsError {
		s.tb.Fatalf("claude -p %q: %v\nstdout: %s\nstderr: %s", prompt, err, stdout.String(), stderr.String())
	}
	for _, marker := range []string{thinkingMarker, guidanceMarker} {
		if strings.Contains(stdout.String(), marker) || s.api.asked(marker) {
			s.tb.Errorf("claude -p %q: the judge's %s reached the model or the output", prompt, marker)
		}
	}
	return res
}

// denied asserts that superego denied a tool call, and Claude was told why.
func (s *scratch) denied(id, phase string) {
	s.tb.Helper()
	text, isError, found := s.api.toolResult(id)
	if !found || !isError || !strings.Contains(text, "superego: phase is "+phase) {
		s.tb.Errorf("tool call %s: found %v, error %v, %q; want superego's denial in %s", id, found, isError, text, phase)
	}
}

// allowed asserts that a tool call ran.
func (s *scratch) allowed(id string) {
	s.tb.Helper()
	if text, isError, found := s.api.toolResult(id); !found || isError {
		s.tb.Errorf("tool call %s: found %v, error %v, %q; want it run", id, found, isError, text)
	}
}

func (s *scratch) exists(name string) bool {
	_, err := os.Stat(filepath.Join(s.dir, name))
	return err == nil
}

// audit is the project's audit.log.
func (s *scratch) audit() []auditLine {
	s.tb.Helper()
	return (&project{tb: s.tb, dir: s.dir}).auditLines()
}
