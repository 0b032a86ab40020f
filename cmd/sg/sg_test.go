package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"superego/agents/agentstest"
)

// Markers planted in the judge's hidden fields: they must never come out.
const (
	thinkingMarker = "THINKING-MARKER-5c1e"
	guidanceMarker = "GUIDANCE-MARKER-77ab"
)

// sid is the session of the recorded hook inputs in testdata/, which
// Claude Code 2.1.197 sent.
const sid = "752728a0-f7ae-48c0-8a7a-b8199f2d54de"

// binDir holds sg and sg-judge, built once for the tests that run them as
// processes (evaluate runs sg-judge; Claude Code runs sg).
var binDir string

func TestMain(m *testing.M) {
	// The stale-lock test's child: take the lock, say so, and wait to be killed.
	if dir := os.Getenv("SG_TEST_HOLD_LOCK"); dir != "" {
		if _, err := Dir(dir).lock(); err != nil {
			os.Exit(1)
		}
		fmt.Println("locked")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	var err error
	if binDir, err = os.MkdirTemp("", "sg-test-bin"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

var built struct {
	once sync.Once
	err  error
}

// binaries builds sg and sg-judge into binDir, once, and returns it.
func binaries(tb testing.TB) string {
	tb.Helper()
	built.once.Do(func() {
		out, err := exec.Command("go", "build", "-o", binDir+string(filepath.Separator), "superego/cmd/sg", "superego/cmd/sg/sg-judge").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if built.err != nil {
		tb.Fatal(built.err)
	}
	return binDir
}

// project is a directory after sg init, with the sample transcript.
type project struct {
	tb         testing.TB
	dir        string
	transcript string
	env        map[string]string
}

func newProject(tb testing.TB) *project {
	tb.Helper()
	p := &project{tb: tb, dir: tb.TempDir(), env: map[string]string{}}
	p.transcript = filepath.Join(p.dir, "session.jsonl")
	if err := os.WriteFile(p.transcript, []byte(p.fixture("transcript.jsonl")), 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(p.dir, "sub"), 0o755); err != nil {
		tb.Fatal(err)
	}
	if code, _, stderr := p.sg("", "init", "--dir", p.dir); code != 0 {
		tb.Fatalf("sg init: %d %s", code, stderr)
	}
	return p
}

func (p *project) superego() Dir { return Dir(filepath.Join(p.dir, ".superego")) }

// fixture reads testdata/name with the project's paths filled in.
func (p *project) fixture(name string) string {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		p.tb.Fatal(err)
	}
	return strings.NewReplacer("$PROJECT", p.dir, "$TRANSCRIPT", p.transcript).Replace(string(b))
}

// sg runs a command in-process, as the binary would, with stdin. Hooks
// find the project from their input's cwd, as they do in Claude Code
// without CLAUDE_PROJECT_DIR; by hand, give --dir.
func (p *project) sg(stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	getenv := func(k string) string { return p.env[k] }
	code = run(context.Background(), args, strings.NewReader(stdin), &out, &errb, getenv)
	return code, out.String(), errb.String()
}

// exec runs the built sg as a process, as Claude Code does.
func (p *project) exec(stdin string, args ...string) (code int, stdout, stderr string) {
	cmd := exec.Command(filepath.Join(binaries(p.tb), "sg"), args...)
	cmd.Dir = p.dir
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + p.dir}
	for k, v := range p.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		p.tb.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

func (p *project) state() State {
	p.tb.Helper()
	st, err := p.superego().read()
	if err != nil {
		p.tb.Fatal(err)
	}
	return st
}

// setPhase records a session's phase, as an evaluation would.
func (p *project) setPhase(session, phase, reason string) {
	p.tb.Helper()
	if _, err := p.superego().update(func(st *State) (bool, error) {
		s := Session{Phase: strings.ToLower(phase), Reason: reason, Since: time.Now().UTC(), LastEvaluated: time.Now().UTC()}
		if phase == Ready {
			s.ApprovedScope = reason
		}
		st.setSession(session, s)
		return true, nil
	}); err != nil {
		p.tb.Fatal(err)
	}
}

func (p *project) setConfig(yaml string) {
	p.tb.Helper()
	if err := os.WriteFile(filepath.Join(p.dir, ".superego", "config.yaml"), []byte(yaml), 0o644); err != nil {
		p.tb.Fatal(err)
	}
}

// useJudge points evaluate at sg-judge, the judge at an OpenAI fake.
func (p *project) useJudge(srv *agentstest.Server) {
	p.env["SUPEREGO_JUDGE"] = filepath.Join(binaries(p.tb), "sg-judge")
	p.env["SUPEREGO_MODEL"] = "openai:gpt-test"
	p.env["OPENAI_API_KEY"] = "k"
	p.env["OPENAI_BASE_URL"] = srv.URL + "/v1"
}

// everything is every file sg wrote, and what it printed: where hidden
// markers must not be.
func (p *project) everything(printed ...string) string {
	var b strings.Builder
	filepath.Walk(filepath.Join(p.dir, ".superego"), func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			data, _ := os.ReadFile(path)
			b.Write(data)
		}
		return nil
	})
	return b.String() + strings.Join(printed, "")
}

// auditLines is audit.log, decoded.
func (p *project) auditLines() []auditLine {
	p.tb.Helper()
	b, _ := os.ReadFile(filepath.Join(p.dir, ".superego", "audit.log"))
	var out []auditLine
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var a auditLine
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			p.tb.Errorf("audit line %q: %v", line, err)
		}
		out = append(out, a)
	}
	return out
}

type auditLine struct {
	Command  string
	Inputs   map[string]string
	Decision string
	Reason   string
}

func decision(tb testing.TB, stdout string) hookSpecific {
	tb.Helper()
	var out hookOutput
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		tb.Fatalf("output %q is not hook JSON: %v", stdout, err)
	}
	return out.HookSpecificOutput
}

// withTool is a recorded PreToolUse input with another tool's name.
func withTool(input, tool string) string {
	return strings.Replace(input, `"tool_name":"Agent"`, `"tool_name":"`+tool+`"`, 1)
}

const (
	denyExploring  = `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"superego: phase is EXPLORING; files are changed only once the user has confirmed an approach (READY). A new session starts in EXPLORING. If the user wants this done now anyway, ask them to run, in a terminal in this project: sg override \"their reason\" (it lets one write through)."}}` + "\n"
	denyDiscussing = `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"superego: phase is DISCUSSING; files are changed only once the user has confirmed an approach (READY). Sessions or JWT is still open. If the user wants this done now anyway, ask them to run, in a terminal in this project: sg override \"their reason\" (it lets one write through)."}}` + "\n"
	allowReady     = `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"superego: phase READY: Implement JWT auth in auth.ts."}}` + "\n"
)

// Each rule of sg (docs/sg.md) for PreToolUse, on the hook inputs Claude Code sent,
// with the exact answers.
func TestCheckRules(t *testing.T) {
	t.Parallel()
	const scope = "Implement JWT auth in auth.ts."
	cases := []struct {
		name    string
		fixture string
		tool    string            // replaces Agent in the fixture
		setup   func(*project)    // before the check
		env     map[string]string // beyond the project's
		want    string
	}{
		{name: "a new session's Write is denied: EXPLORING", fixture: "pretooluse_write.json", want: denyExploring},
		{name: "a new session's Bash is denied", fixture: "pretooluse_bash.json", want: denyExploring},
		{name: "Agent is gated", fixture: "pretooluse_agent.json", want: denyExploring},
		{name: "Task, Agent's older name, is gated", fixture: "pretooluse_agent.json", tool: "Task", want: denyExploring},
		{name: "MultiEdit is gated", fixture: "pretooluse_agent.json", tool: "MultiEdit", want: denyExploring},
		{name: "NotebookEdit is gated", fixture: "pretooluse_agent.json", tool: "NotebookEdit", want: denyExploring},
		{name: "a subagent's Write is denied: the session is EXPLORING", fixture: "pretooluse_subagent_write.json", want: denyExploring},
		{
			name: "a subagent's Write follows its session's phase: DISCUSSING", fixture: "pretooluse_subagent_write.json",
			setup: func(p *project) { p.setPhase(sid, Discussing, "Sessions or JWT is still open.") }, want: denyDiscussing,
		},
		{
			name: "a subagent's Write follows its session's phase: READY", fixture: "pretooluse_subagent_write.json",
			setup: func(p *project) { p.setPhase(sid, Ready, scope) }, want: allowReady,
		},
		{
			name: "Read is never gated", fixture: "pretooluse_read.json",
			want: `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"superego: Read only reads; reads are never gated"}}` + "\n",
		},
		{
			name: "TaskCreate is not Task", fixture: "pretooluse_agent.json", tool: "TaskCreate",
			want: `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"superego: TaskCreate only reads; reads are never gated"}}` + "\n",
		},
		{name: "READY allows a write", fixture: "pretooluse_write.json", setup: func(p *project) { p.setPhase(sid, Ready, scope) }, want: allowReady},
		{
			name: "another session's READY is not this one's", fixture: "pretooluse_write.json",
			setup: func(p *project) { p.setPhase("an-earlier-session", Ready, scope) }, want: denyExploring,
		},
		{
			name: "after cd sub, $CLAUDE_PROJECT_DIR names the project", fixture: "pretooluse_agent.json", // its cwd is $PROJECT/sub
			setup: func(p *project) {
				p.setPhase(sid, Ready, scope)
				os.Mkdir(filepath.Join(p.dir, "sub", ".superego"), 0o755) // a nested one is not the project's
			},
			env: map[string]string{"CLAUDE_PROJECT_DIR": "$PROJECT"}, want: allowReady,
		},
		{
			name: "after cd sub, without $CLAUDE_PROJECT_DIR, the nearest .superego/ above cwd", fixture: "pretooluse_agent.json",
			setup: func(p *project) { p.setPhase(sid, Ready, scope) }, want: allowReady,
		},
		{
			name: "advise mode allows, and tells Claude the phase", fixture: "pretooluse_write.json",
			setup: func(p *project) {
				p.setConfig("mode: advise\n")
				p.setPhase(sid, Discussing, "Sessions or JWT is still open.")
			},
			want: `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"superego (advise): phase DISCUSSING","additionalContext":"superego (advise): the conversation is in phase DISCUSSING, not READY. Sessions or JWT is still open. The user has not confirmed an approach for changes yet; consider asking before you go on."}}` + "\n",
		},
		{
			name: "advise mode in READY names the scope", fixture: "pretooluse_write.json",
			setup: func(p *project) {
				p.setConfig("mode: advise\n")
				p.setPhase(sid, Ready, scope)
			},
			want: `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"superego (advise): phase READY","additionalContext":"superego (advise): the conversation is in phase READY: Implement JWT auth in auth.ts."}}` + "\n",
		},
		{name: "sg disable: no answer at all", fixture: "pretooluse_write.json", setup: func(p *project) { p.sg("", "disable", "--dir", p.dir) }, want: ""},
		{name: "SUPEREGO_DISABLED=1: no answer at all", fixture: "pretooluse_write.json", env: map[string]string{"SUPEREGO_DISABLED": "1"}, want: ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newProject(t)
			if c.setup != nil {
				c.setup(p)
			}
			for k, v := range c.env {
				p.env[k] = strings.ReplaceAll(v, "$PROJECT", p.dir)
			}
			input := p.fixture(c.fixture)
			if c.tool != "" {
				input = withTool(input, c.tool)
			}
			code, out, stderr := p.sg(input, "check")
			if code != 0 || out != c.want {
				t.Errorf("exit %d\n got %s\nwant %s\nstderr: %s", code, out, c.want, stderr)
			}
		})
	}
}

// Every check is audited, a subagent's with its agent_id.
func TestCheckAudit(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	p.sg(p.fixture("pretooluse_subagent_write.json"), "check")
	lines := p.auditLines()
	last := lines[len(lines)-1]
	if len(lines) != 2 || last.Command != "check" || last.Decision != "deny" || last.Inputs["agent_id"] != "ab3dc020da8f3a846" || last.Inputs["session_id"] != sid {
		t.Errorf("audit.log: %+v", lines)
	}
}

// What sg answers on input it cannot use, for each hook.
func TestBadHookInput(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		args       []string
		input      string // $PROJECT and $TRANSCRIPT are filled in; fixture: a name in testdata
		setup      func(*project)
		wantCode   int
		wantOut    string
		wantStderr string
	}{
		{
			name: "check: not JSON", args: []string{"check"}, input: `{"session_id": "s", "tool_name": "Wri`,
			wantOut: `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"superego could not read the hook's input: hook input is not JSON: unexpected EOF"}}` + "\n",
		},
		{
			name: "check: JSON of the wrong shape", args: []string{"check"}, input: `{"session_id": 7}`,
			wantOut: `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"superego could not read the hook's input: hook input is not JSON: json: cannot unmarshal number into Go struct field HookInput.session_id of type string"}}` + "\n",
		},
		{
			name: "check: another event", args: []string{"check"}, input: `{"session_id":"s","cwd":"$PROJECT","hook_event_name":"PostToolUse","tool_name":"Write"}`,
			wantCode: 1, wantStderr: "sg check: the hook event is \"PostToolUse\"; sg check answers PreToolUse only (sg hooks --install wires it so)\n",
		},
		{
			name: "check: no tool name", args: []string{"check"}, input: `{"session_id":"s","cwd":"$PROJECT","hook_event_name":"PreToolUse"}`,
			wantOut: `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"superego: no tool name (give --tool-name or the hook's input)"}}` + "\n",
		},
		{
			name: "check: no project above cwd", args: []string{"check"}, input: `{"session_id":"s","cwd":"/","hook_event_name":"PreToolUse","tool_name":"Write"}`,
			wantOut: `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"superego: no .superego/ at or above /; run sg init there, or remove sg's hooks from .claude/settings.json"}}` + "\n",
		},
		{
			name: "check: $CLAUDE_PROJECT_DIR without .superego/", args: []string{"check"}, input: "pretooluse_write.json",
			setup:   func(p *project) { p.env["CLAUDE_PROJECT_DIR"] = "/nonexistent" },
			wantOut: `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"superego: no .superego/ in $CLAUDE_PROJECT_DIR (/nonexistent); run sg init there, or remove sg's hooks from .claude/settings.json"}}` + "\n",
		},
		{
			name: "check: a torn state.json", args: []string{"check"}, input: "pretooluse_write.json",
			setup: func(p *project) {
				os.WriteFile(filepath.Join(p.dir, ".superego", "state.json"), []byte(`{"sessions": {"a": {"phase": "rea`), 0o644)
			},
			wantOut: `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"superego: superego state unavailable: state.json: unexpected end of JSON input; run sg reset if it persists"}}` + "\n",
		},
		{
			name: "check: an unknown phase", args: []string{"check"}, input: "pretooluse_write.json",
			setup: func(p *project) {
				os.WriteFile(filepath.Join(p.dir, ".superego", "state.json"), []byte(`{"sessions": {"a": {"phase": "done"}}}`), 0o644)
			},
			wantOut: `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"superego: superego state unavailable: state.json: session \"a\": unknown phase \"done\"; run sg reset if it persists"}}` + "\n",
		},
		{
			name: "check: a config.yaml it cannot use", args: []string{"check"}, input: "pretooluse_write.json",
			setup:   func(p *project) { p.setConfig("mode: lenient\n") },
			wantOut: `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"superego: superego state unavailable: config.yaml: mode \"lenient\": want gate or advise; fix .superego/config.yaml"}}` + "\n",
		},
		{
			name: "evaluate: not JSON", args: []string{"evaluate"}, input: `prompt: hello`,
			wantCode: 1, wantStderr: "sg evaluate: superego could not read the hook's input: hook input is not JSON: invalid character 'p' looking for beginning of value\n",
		},
		{
			name: "evaluate: another event", args: []string{"evaluate"}, input: "pretooluse_write.json",
			wantCode: 1, wantStderr: "sg evaluate: the hook event is \"PreToolUse\"; sg evaluate answers UserPromptSubmit only (sg hooks --install wires it so)\n",
		},
		{
			name: "evaluate: no project", args: []string{"evaluate"}, input: `{"session_id":"s","cwd":"/","hook_event_name":"UserPromptSubmit","prompt":"hi"}`,
			wantCode: 1, wantStderr: "sg evaluate: superego: no .superego/ at or above /; run sg init there, or remove sg's hooks from .claude/settings.json\n",
		},
		{
			name: "context-inject: an unknown event", args: []string{"context-inject"}, input: `{"session_id":"s","cwd":"$PROJECT","hook_event_name":"Setup"}`,
			wantCode: 1, wantStderr: "sg context-inject: the hook event is \"Setup\"; sg context-inject answers SessionStart only (sg hooks --install wires it so)\n",
		},
		{
			name: "precompact: not JSON", args: []string{"precompact"}, input: `{`,
			wantCode: 1, wantStderr: "sg precompact: superego could not read the hook's input: hook input is not JSON: unexpected EOF\n",
		},
		{
			name: "an unknown command", args: []string{"frobnicate"},
			wantCode: 2, wantStderr: "sg: unknown command \"frobnicate\"\n\n" + usage,
		},
		{
			name: "by hand: no project", args: []string{"history", "--dir", "/"},
			wantCode: 1, wantStderr: "sg history: no .superego/ in / (--dir); run sg init there\n",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newProject(t)
			if c.setup != nil {
				c.setup(p)
			}
			input := c.input
			if strings.HasSuffix(input, ".json") {
				input = p.fixture(input)
			}
			input = strings.NewReplacer("$PROJECT", p.dir, "$TRANSCRIPT", p.transcript).Replace(input)
			code, out, stderr := p.sg(input, c.args...)
			if code != c.wantCode || out != c.wantOut || stderr != c.wantStderr {
				t.Errorf("exit %d, want %d\nstdout %s\nwant   %s\nstderr %q\nwant   %q", code, c.wantCode, out, c.wantOut, stderr, c.wantStderr)
			}
		})
	}
}

// Hook input is read whole, however large; a Write of a
// 5 MB file in READY is allowed. This runs the binary, which reads a pipe
// as it does under Claude Code.
func TestCheckLargeWrite(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	p.setPhase(sid, Ready, "Implement JWT auth in auth.ts.")
	content, _ := json.Marshal(strings.Repeat("export const x = 1 // ünïcode\n", 5<<20/30))
	input := strings.Replace(p.fixture("pretooluse_write.json"), `"export const login = () => {}\n"`, string(content), 1)
	if len(input) < 5<<20 {
		t.Fatalf("the input is %d bytes", len(input))
	}
	code, out, stderr := p.exec(input, "check")
	if code != 0 || out != allowReady {
		t.Errorf("a 5 MB Write in READY: exit %d, %s %s", code, out, stderr)
	}
}

// SessionStart: startup and clear begin the session in EXPLORING; resume
// and compact keep its phase.
func TestSessionStart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		source string
		want   string
	}{
		{"startup", Exploring}, {"clear", Exploring}, {"resume", Ready}, {"compact", Ready},
	} {
		t.Run(c.source, func(t *testing.T) {
			p := newProject(t)
			p.setPhase(sid, Ready, "Implement JWT auth in auth.ts.")
			input := strings.Replace(p.fixture("sessionstart.json"), `"source":"startup"`, `"source":"`+c.source+`"`, 1)
			code, out, _ := p.sg(input, "context-inject")
			d := decision(t, out)
			if code != 0 || d.HookEventName != "SessionStart" || !strings.Contains(d.AdditionalContext, "Current phase: "+c.want) {
				t.Errorf("exit %d: %+v", code, d)
			}
			if got := p.state().session(sid).phase(); got != c.want {
				t.Errorf("phase %s after SessionStart %s", got, c.source)
			}
			_, out, _ = p.sg(p.fixture("pretooluse_write.json"), "check")
			if want := map[string]string{Exploring: "deny", Ready: "allow"}[c.want]; decision(t, out).PermissionDecision != want {
				t.Errorf("then a Write: %s", out)
			}
		})
	}
}

// The exact answer to a new session's SessionStart.
func TestSessionStartAnswer(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	code, out, _ := p.sg(p.fixture("sessionstart.json"), "context-inject")
	want, _ := json.Marshal(hookOutput{hookSpecific{HookEventName: "SessionStart", AdditionalContext: contract + "\n\nCurrent phase: EXPLORING"}})
	if code != 0 || out != string(want)+"\n" {
		t.Errorf("exit %d\n got %s\nwant %s", code, out, want)
	}
	if !strings.Contains(contract, "Agent") || !strings.Contains(contract, "subagent") || !strings.Contains(contract, "in a terminal") {
		t.Errorf("the contract does not say what is gated and who overrides:\n%s", contract)
	}
}

func TestOverrideAllowsExactlyOneWrite(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	write := p.fixture("pretooluse_write.json")
	p.setPhase(sid, Discussing, "Sessions or JWT is still open.")
	if code, out, _ := p.sg("", "override", "--dir", p.dir); code != 2 || out != "" {
		t.Errorf("override without a reason: exit %d %q", code, out)
	}
	if code, _, _ := p.sg("", "override", "--dir", p.dir, "user approved the JWT approach"); code != 0 {
		t.Fatal("override failed")
	}
	// A read does not use the override up.
	p.sg(p.fixture("pretooluse_read.json"), "check")
	code, out, _ := p.sg(write, "check")
	want := `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"superego: allowed once by override: user approved the JWT approach"}}` + "\n"
	if code != 0 || out != want {
		t.Errorf("first write after override:\n got %s\nwant %s", out, want)
	}
	if _, out, _ = p.sg(write, "check"); out != denyDiscussing {
		t.Errorf("second write after override: %s; an override allows one action", out)
	}
	_, out, _ = p.sg("", "history", "--dir", p.dir, "--limit", "5")
	if !strings.Contains(out, `"type": "override_granted"`) || !strings.Contains(out, `"type": "override_used"`) {
		t.Errorf("history:\n%s", out)
	}
	if st := p.state(); st.session(sid).Phase != "discussing" || st.PendingOverride != nil {
		t.Errorf("an override changes no phase and is used up: %+v", st)
	}
}

func TestDisable(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	write := p.fixture("pretooluse_write.json")
	p.sg("", "disable", "--dir", p.dir)
	p.sg("", "reset", "--dir", p.dir)
	if !p.state().Disabled {
		t.Error("reset switched superego back on")
	}
	p.sg("", "enable", "--dir", p.dir)
	if _, out, _ := p.sg(write, "check"); out != denyExploring {
		t.Errorf("enabled again: %s", out)
	}
	p.env["SUPEREGO_DISABLED"] = "1"
	if code, out, _ := p.sg(p.fixture("userpromptsubmit.json"), "evaluate"); code != 0 || out != "" {
		t.Errorf("SUPEREGO_DISABLED=1 evaluate: exit %d, %q", code, out)
	}
}

func TestRecursionGuard(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	own := filepath.Join(p.dir, ".superego", "session", "s.jsonl")
	os.MkdirAll(filepath.Dir(own), 0o755)
	os.WriteFile(own, []byte(p.fixture("transcript.jsonl")), 0o644)
	write := strings.Replace(p.fixture("pretooluse_write.json"), p.transcript, own, 1)
	if code, out, _ := p.sg(write, "check"); code != 0 || out != "" {
		t.Errorf("check on superego's own transcript: exit %d, %q", code, out)
	}
	p.useJudge(agentstest.OpenAI(t, func(agentstest.Request) agentstest.Answer {
		t.Error("the evaluator called a model for its own session")
		return agentstest.Reply("", Ready, "", "")
	}))
	if code, _, _ := p.sg(strings.Replace(p.fixture("userpromptsubmit.json"), p.transcript, own, 1), "evaluate"); code != 0 {
		t.Error("evaluate failed")
	}
	if len(p.state().Sessions) != 0 {
		t.Error("the evaluator evaluated its own session")
	}
}

func TestEvaluateWithProviderOverHTTP(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	srv := agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		return agentstest.Reply(thinkingMarker, Ready, guidanceMarker, "Implement JWT authentication in auth.ts.")
	})
	p.useJudge(srv)
	code, out, stderr := p.sg(p.fixture("userpromptsubmit.json"), "evaluate")
	if code != 0 || out != "" {
		t.Fatalf("evaluate: exit %d, stdout %q, stderr %s", code, out, stderr)
	}
	s := p.state().session(sid)
	if s.Phase != "ready" || s.ApprovedScope != "Implement JWT authentication in auth.ts." || s.LastEvaluated.IsZero() {
		t.Errorf("session after READY: %+v", s)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model calls; want one per user message", len(reqs))
	}
	asked := reqs[0].System + reqs[0].LastUser()
	for _, want := range []string{"Decide with exactly one of: DISCUSSING, EXPLORING, READY", "Only the user's messages move the phase", "Should we use sessions or JWT?", "Claude used Read", "Shall I implement JWT auth", "Go ahead and implement it in auth.ts", "The phase so far: EXPLORING; the session has just begun."} {
		if !strings.Contains(asked, want) {
			t.Errorf("the judge was not given %q", want)
		}
	}
	if strings.Contains(asked, "Let me look at the code first.") {
		t.Error("Claude's own thinking went to the judge")
	}
	// prompt.md is the judge's constitution.
	promptPath := filepath.Join(p.dir, ".superego", "prompt.md")
	custom, _ := os.ReadFile(promptPath)
	os.WriteFile(promptPath, append(custom, "\nA refactoring the user asked for by name is READY at once.\n"...), 0o644)
	p.sg(p.fixture("userpromptsubmit.json"), "evaluate")
	if reqs := srv.Requests(); len(reqs) != 2 || !strings.Contains(reqs[1].System, "A refactoring the user asked for by name is READY at once.") {
		t.Error("the judge was not given the project's prompt.md")
	}
	_, hist, _ := p.sg("", "history", "--dir", p.dir)
	if !strings.Contains(hist, `"type": "phase_transition"`) || !strings.Contains(hist, `"to_state": "ready"`) || !strings.Contains(hist, `"session_id": "`+sid) {
		t.Errorf("journal:\n%s", hist)
	}
	_, out, _ = p.sg(p.fixture("pretooluse_write.json"), "check")
	if decision(t, out).PermissionDecision != "allow" {
		t.Errorf("check after READY: %s", out)
	}
	_, ctxOut, _ := p.sg(p.fixture("sessionstart_resume.json"), "context-inject")
	if all := p.everything(out, hist, stderr, ctxOut); strings.Contains(all, thinkingMarker) || strings.Contains(all, guidanceMarker) {
		t.Error("the judge's thinking or agent_guidance came out")
	}
}

// A new session's first prompt comes before Claude Code has written its
// transcript (with --no-session-persistence it never does): the judge
// decides from the prompt, and the gate holds.
func TestEvaluateWithoutTranscript(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	srv := agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		return agentstest.Reply("", Discussing, "", "Which token lifetime is still open.")
	})
	p.useJudge(srv)
	os.Remove(p.transcript)
	code, out, stderr := p.sg(p.fixture("userpromptsubmit.json"), "evaluate")
	if code != 0 || out != "" || stderr != "" {
		t.Fatalf("evaluate: exit %d, %q, %s", code, out, stderr)
	}
	asked := srv.Requests()[0].LastUser()
	if !strings.Contains(asked, "The conversation so far (its most recent part):\n(nothing yet)") || !strings.Contains(asked, "Go ahead and implement it in auth.ts") {
		t.Errorf("the judge was asked:\n%s", asked)
	}
	if s := p.state().session(sid); s.Phase != "discussing" {
		t.Errorf("session: %+v", s)
	}
	if _, out, _ := p.sg(p.fixture("pretooluse_write.json"), "check"); decision(t, out).PermissionDecision != "deny" {
		t.Errorf("a write with no transcript: %s", out)
	}
}

// A new session after a READY one is judged from EXPLORING, and is not
// told of the other session's approval.
func TestNewSessionAfterReady(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	srv := agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		return agentstest.Reply("", Ready, "", "Implement JWT auth in auth.ts.")
	})
	p.useJudge(srv)
	other := strings.ReplaceAll(p.fixture("userpromptsubmit.json"), sid, "an-earlier-session")
	p.sg(other, "evaluate")
	if _, out, _ := p.sg(p.fixture("pretooluse_write.json"), "check"); out != denyExploring {
		t.Errorf("a new session after a READY one: %s", out)
	}
	p.sg(p.fixture("userpromptsubmit.json"), "evaluate")
	asked := srv.Requests()[1].LastUser()
	if !strings.Contains(asked, "The phase so far: EXPLORING; the session has just begun.") || strings.Contains(asked, "phase_transition") {
		t.Errorf("the new session's judge was asked:\n%s", asked)
	}
}

// A background subagent's end reaches UserPromptSubmit as a prompt Claude
// Code wrote: it is not the user's, so the phase stays and no model is
// asked.
func TestEvaluateTaskNotification(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	p.setPhase(sid, Ready, "Implement JWT auth in auth.ts.")
	p.useJudge(agentstest.OpenAI(t, func(agentstest.Request) agentstest.Answer {
		t.Error("the judge was asked about a task notification")
		return agentstest.Reply("", Exploring, "", "")
	}))
	if code, out, stderr := p.sg(p.fixture("userpromptsubmit_task_notification.json"), "evaluate"); code != 0 || out != "" || stderr != "" {
		t.Errorf("exit %d, %q, %q", code, out, stderr)
	}
	lines := p.auditLines()
	if s := p.state().session(sid); s.phase() != Ready || lines[len(lines)-1].Decision != "skip" {
		t.Errorf("phase %s; audit %+v", s.phase(), lines[len(lines)-1])
	}
}

// In advise mode the phase reaches Claude before its turn, as the
// UserPromptSubmit answer's additionalContext.
func TestEvaluateAdvise(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	p.setConfig("mode: advise\n")
	p.useJudge(agentstest.OpenAI(t, func(r agentstest.Request) agentstest.Answer {
		return agentstest.Reply(thinkingMarker, Discussing, guidanceMarker, "Which token lifetime is still open.")
	}))
	code, out, stderr := p.sg(p.fixture("userpromptsubmit.json"), "evaluate")
	want := `{"hookSpecificOutput":{"hookEventName":"UserPromptSubmit","additionalContext":"superego (advise): the conversation is in phase DISCUSSING, not READY. Which token lifetime is still open. The user has not confirmed an approach for changes yet; consider asking before you go on."}}` + "\n"
	if code != 0 || out != want {
		t.Errorf("exit %d\n got %s\nwant %s\nstderr %s", code, out, want, stderr)
	}
	_, check, _ := p.sg(p.fixture("pretooluse_write.json"), "check")
	if d := decision(t, check); d.PermissionDecision != "allow" || !strings.Contains(d.AdditionalContext, "Which token lifetime is still open.") {
		t.Errorf("advise check: %+v", d)
	}
	if all := p.everything(out, check, stderr); strings.Contains(all, thinkingMarker) || strings.Contains(all, guidanceMarker) {
		t.Error("the judge's thinking or agent_guidance came out")
	}
}

func TestEvaluateFailsToExploring(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]agentstest.Answer{
		"server error": {Status: 500, Text: "overloaded"},
		"garbage":      {Text: "I think it is probably fine?"},
		"not a phase":  agentstest.Reply("", "ACCEPT", "", ""),
	} {
		t.Run(name, func(t *testing.T) {
			p := newProject(t)
			p.setPhase(sid, Ready, "Implement JWT auth in auth.ts.")
			p.useJudge(agentstest.OpenAI(t, func(agentstest.Request) agentstest.Answer { return answer }))
			code, out, stderr := p.sg(p.fixture("userpromptsubmit.json"), "evaluate")
			if code != 0 || out != "" || !strings.Contains(stderr, "assuming EXPLORING") {
				t.Errorf("exit %d, stdout %q, stderr %q", code, out, stderr)
			}
			if s := p.state().session(sid); s.Phase != "exploring" {
				t.Errorf("phase %s after a failed evaluation", s.Phase)
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		p := newProject(t)
		p.setConfig("model: openai:gpt-test\nmode: gate\ntimeout: 200ms\n")
		p.useJudge(agentstest.OpenAI(t, func(agentstest.Request) agentstest.Answer { return agentstest.Answer{Hang: true} }))
		start := time.Now()
		if code, _, stderr := p.sg(p.fixture("userpromptsubmit.json"), "evaluate"); code != 0 || !strings.Contains(stderr, "assuming EXPLORING") || time.Since(start) > 5*time.Second {
			t.Errorf("exit %d after %v: %s", code, time.Since(start), stderr)
		}
	})
	t.Run("no sg-judge", func(t *testing.T) {
		p := newProject(t)
		p.setPhase(sid, Ready, "Implement JWT auth in auth.ts.")
		p.env["SUPEREGO_JUDGE"] = filepath.Join(p.dir, "no-such-judge")
		code, _, stderr := p.sg(p.fixture("userpromptsubmit.json"), "evaluate")
		if code != 0 || !strings.Contains(stderr, "assuming EXPLORING") || !strings.Contains(stderr, "no-such-judge") || p.state().session(sid).Phase != "exploring" {
			t.Errorf("exit %d: %s", code, stderr)
		}
	})
}

func TestContextInjectAndPrecompact(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	p.setPhase(sid, Discussing, "Sessions or JWT is still open.")
	if code, out, _ := p.sg(p.fixture("precompact.json"), "precompact"); code != 0 || out != "" {
		t.Errorf("precompact: %d %q", code, out)
	}
	_, hist, _ := p.sg("", "history", "--dir", p.dir)
	if !strings.Contains(hist, `"type": "precompact_summary"`) || !strings.Contains(hist, "Phase DISCUSSING") || !strings.Contains(hist, "Shall I implement JWT auth") {
		t.Errorf("history after precompact:\n%s", hist)
	}
	_, out, _ := p.sg(p.fixture("sessionstart_resume.json"), "context-inject")
	if d := decision(t, out).AdditionalContext; !strings.Contains(d, "precompact_summary") || !strings.Contains(d, "Current phase: DISCUSSING since") {
		t.Errorf("context-inject does not recall the journal and the phase: %s", out)
	}
}

func TestHooksInstallKeepsSettings(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	settings := filepath.Join(p.dir, ".claude", "settings.json")
	os.MkdirAll(filepath.Dir(settings), 0o755)
	os.WriteFile(settings, []byte(`{"model": "opus", "permissions": {"allow": ["Bash(npm test)"]},
 "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./lint.sh"}]}]}}`), 0o644)
	for range 2 {
		if code, _, stderr := p.sg("", "hooks", "--install", "--dir", p.dir); code != 0 {
			t.Fatal(stderr)
		}
	}
	var got struct {
		Model       string
		Permissions map[string][]string
		Hooks       map[string][]struct {
			Matcher string
			Hooks   []struct{ Type, Command string }
		}
	}
	b, _ := os.ReadFile(settings)
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	pre := got.Hooks["PreToolUse"]
	if got.Model != "opus" || len(got.Permissions["allow"]) != 1 || len(pre) != 2 || pre[0].Hooks[0].Command != "./lint.sh" ||
		pre[1].Matcher != "Edit|Write|MultiEdit|NotebookEdit|Bash|Agent|Task" || pre[1].Hooks[0].Command != "sg check" {
		t.Errorf("settings after two installs:\n%s", b)
	}
	for _, event := range []string{"UserPromptSubmit", "SessionStart", "PreCompact"} {
		if len(got.Hooks[event]) != 1 {
			t.Errorf("%s: %+v", event, got.Hooks[event])
		}
	}
	os.WriteFile(settings, []byte(`{"hooks": `), 0o644)
	if code, _, _ := p.sg("", "hooks", "--install", "--dir", p.dir); code == 0 {
		t.Error("installed over settings that are not JSON")
	}
}

// The matcher Claude Code is given names exactly the tools sg gates.
func TestMatcherNamesTheWriteTools(t *testing.T) {
	t.Parallel()
	matched := strings.Split(checkMatcher, "|")
	var gated []string
	for tool := range writeTools {
		gated = append(gated, tool)
	}
	slices.Sort(matched)
	slices.Sort(gated)
	if !slices.Equal(matched, gated) {
		t.Errorf("matcher %v, gated %v", matched, gated)
	}
}

// Claude Code runs hooks in parallel: 20 sg processes at once on one
// state (checks, evaluations, overrides) leave it whole, lose no audit
// line, and let each override through exactly once.
func TestConcurrentHooks(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	p.useJudge(agentstest.OpenAI(t, func(agentstest.Request) agentstest.Answer {
		return agentstest.Reply("", Discussing, "", "Sessions or JWT is still open.")
	}))
	p.env["CLAUDE_PROJECT_DIR"] = p.dir
	p.setPhase(sid, Discussing, "Sessions or JWT is still open.")
	p.sg("", "override", "--dir", p.dir, "before")
	write, prompt := p.fixture("pretooluse_write.json"), p.fixture("userpromptsubmit.json")
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for i := range 20 {
		wg.Go(func() {
			switch {
			case i%5 == 0:
				p.exec(prompt, "evaluate")
			case i%5 == 1:
				if code, _, stderr := p.exec("", "override", fmt.Sprintf("override %d", i)); code != 0 {
					t.Errorf("override: %d %s", code, stderr)
				}
			default:
				_, out, _ := p.exec(write, "check")
				var answer hookOutput
				if err := json.Unmarshal([]byte(out), &answer); err != nil {
					t.Errorf("check answered %q: %v", out, err)
				}
				if answer.HookSpecificOutput.PermissionDecision == "allow" {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	st := p.state() // fails on a torn file
	if s := st.session(sid); s.Phase != "discussing" || s.LastEvaluated.IsZero() {
		t.Errorf("session: %+v", s)
	}
	recs, err := p.superego().decisions(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	granted, used := map[string]int{}, map[string]int{}
	for _, r := range recs {
		switch r.Type {
		case "override_granted":
			granted[r.Context]++
		case "override_used":
			used[r.Context]++
		}
	}
	if len(granted) != 5 || allowed != len(used) || allowed == 0 {
		t.Errorf("%d overrides granted, %d writes allowed, overrides used: %v", len(granted), allowed, used)
	}
	for reason, n := range used {
		if n != 1 || granted[reason] != 1 {
			t.Errorf("override %q used %d times", reason, n)
		}
	}
	if st.PendingOverride != nil && used[st.PendingOverride.Reason] > 0 {
		t.Errorf("a used override is still pending: %+v", st.PendingOverride)
	}
	if lines := p.auditLines(); len(lines) != 1+1+20 { // init, override, then the 20
		t.Errorf("audit.log has %d lines; a line lost or split", len(lines))
	}
}

// A lock left by a hook that was killed does not block the next one.
func TestLockOfKilledHolder(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SG_TEST_HOLD_LOCK="+filepath.Join(p.dir, ".superego"))
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := stdout.Read(buf); err != nil || string(buf) != "locked" {
		t.Fatalf("child: %q %v", buf, err)
	}
	done := make(chan string)
	go func() { _, out, _ := p.sg("", "override", "--dir", p.dir, "while locked"); done <- out }()
	select {
	case out := <-done:
		t.Fatalf("override ran while the lock was held: %s", out)
	case <-time.After(100 * time.Millisecond):
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	select {
	case out := <-done:
		if !strings.Contains(out, "allowed, once") {
			t.Errorf("after the holder died: %s", out)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the killed holder's lock was never released")
	}
}

func TestTranscriptBudget(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	all, err := readTranscript(p.transcript, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "User: We need login for the app. Should we use sessions or JWT?\nClaude: Let me look at how requests are handled.\n" +
		`Claude used Read: {"file_path":"` + p.dir + `/server.ts"}` + "\n(tool result: \"import express from 'express'\\nconst app = express()\\n\")\n" +
		"Claude: The API is stateless, so JWT fits. Shall I implement JWT auth in auth.ts?"
	if all != want {
		t.Errorf("rendered:\n%s\nwant:\n%s", all, want)
	}
	tail, _ := readTranscript(p.transcript, 90)
	if tail != "Claude: The API is stateless, so JWT fits. Shall I implement JWT auth in auth.ts?" {
		t.Errorf("with a budget of 90 bytes: %q", tail)
	}
}

func TestBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []string{"mode: lenient\n", "timeout: 0s\n", "model: [\n"} {
		p := newProject(t)
		p.setConfig(cfg)
		p.setPhase(sid, Ready, "Implement JWT auth in auth.ts.")
		// evaluate never blocks the prompt: a config it cannot use is a failed evaluation.
		if code, _, stderr := p.sg(p.fixture("userpromptsubmit.json"), "evaluate"); code != 0 || !strings.Contains(stderr, "config.yaml") || p.state().session(sid).Phase != "exploring" {
			t.Errorf("%q: evaluate exit %d, %s, phase %s", cfg, code, stderr, p.state().session(sid).Phase)
		}
		// check cannot know the mode: it denies, saying why.
		if _, out, _ := p.sg(p.fixture("pretooluse_write.json"), "check"); !strings.Contains(decision(t, out).PermissionDecisionReason, "config.yaml") || decision(t, out).PermissionDecision != "deny" {
			t.Errorf("%q: check %s", cfg, out)
		}
	}
}

// state.json keeps a bounded number of sessions; the one evaluated longest
// ago goes first, and is back in EXPLORING.
func TestSessionsKept(t *testing.T) {
	t.Parallel()
	var st State
	start := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for i := range keptSessions + 3 {
		st.setSession(fmt.Sprint("s", i), Session{Phase: "ready", LastEvaluated: start.Add(time.Duration(i) * time.Minute)})
	}
	if len(st.Sessions) != keptSessions || st.session("s2").phase() != Exploring || st.session("s3").phase() != Ready {
		t.Errorf("%d sessions kept; s2 %s, s3 %s", len(st.Sessions), st.session("s2").phase(), st.session("s3").phase())
	}
}

// config.yaml is read as YAML's flat mappings are; anything else is
// refused, naming the line.
func TestConfigFile(t *testing.T) {
	t.Parallel()
	defaults := Config{Model: "claude-cli", Mode: "gate", Timeout: time.Minute, TranscriptBudget: 24000}
	for _, c := range []struct {
		name, text string
		want       Config
		err        string
	}{
		{"as sg init writes it", defaultConfig, defaults, ""},
		{"quoted values and comments", "model: \"openai:gpt-4o-mini\" # the judge\nmode: 'advise'\ntimeout: 90s # a minute and a half\n\n---\n",
			Config{Model: "openai:gpt-4o-mini", Mode: "advise", Timeout: 90 * time.Second, TranscriptBudget: 24000}, ""},
		{"a plain value with a #", "model: ollama:llama#3\n", Config{Model: "ollama:llama#3", Mode: "gate", Timeout: time.Minute, TranscriptBudget: 24000}, ""},
		{"an unknown setting", "mode: gate\nmdoe: advise\n", defaults, `config.yaml: line 2: unknown setting "mdoe" (sg knows model, mode, timeout, transcript_budget)`},
		{"a nested mapping", "model:\n  name: x\n", defaults, "config.yaml: line 2: want key: value, as sg writes it"},
		{"a flow value", "model: {name: x}\n", defaults, "config.yaml: line 1: model: want a plain or quoted value"},
		{"a set twice", "mode: gate\nmode: advise\n", defaults, "config.yaml: line 2: mode is set twice"},
		{"a duration without a unit", "timeout: 60\n", defaults, `config.yaml: line 1: timeout: want a duration such as 60s: time: missing unit in duration "60"`},
		{"a budget that is not a number", "transcript_budget: lots\n", defaults, `config.yaml: line 1: transcript_budget: want a number of bytes: strconv.Atoi: parsing "lots": invalid syntax`},
		{"an unterminated quote", "model: \"openai\n", defaults, "config.yaml: line 1: model: a quoted value must end its line"},
		{"a mode sg does not know", "mode: lenient\n", defaults, `config.yaml: mode "lenient": want gate or advise`},
		{"a zero timeout", "timeout: 0s\n", defaults, "config.yaml: timeout and transcript_budget must be more than zero"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newProject(t)
			p.setConfig(c.text)
			got, err := p.superego().config()
			if c.err != "" {
				if err == nil || err.Error() != c.err {
					t.Errorf("error %v, want %s", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("%+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}
