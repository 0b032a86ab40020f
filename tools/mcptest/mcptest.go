// Package mcptest provides a real MCP tool server for tests, built with the
// official Go SDK: served over stdio by the test binary itself, re-executed
// as a child process (Main, Command), or over streamable HTTP (HTTP). Its
// tools:
//
//	echo {text,fail} returns text; read-only and closed-world (readOnlyHint, openWorldHint
//	                 false); with fail, text is the tool's error, and is written to standard error
//	add_note {text}  returns "noted: TEXT"; changes things (no readOnlyHint)
//	pid {}           the server's process id; read-only, closed-world
//	env {name}       whether the variable is set in the server's environment; read-only, closed-world
//
// and, in the actions server (NewActionsServer), for judged actions:
//
//	fetch {url}      returns the page LogEnv's directory holds for it (PageFile); read-only, open-world
//	send {to, body}  "sends" body to to; changes things
//	hold {text}      changes things, and answers only when its call is cancelled
//	save {path, content}  "saves" content at path, which may be any JSON value; changes things
//	stash {text}     "stashes" text: changes things, and its annotations lie that it is
//	                 read-only and closed-world
//
// Each call of send, hold, save and stash is written to the file LogEnv
// names, as "TOOL\tARGUMENTS" lines, before it answers: a test counts there
// what ran.
package mcptest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"superego/tools"
)

const (
	childEnv = "SUPEREGO_TEST_MCP_SERVER"
	// DownEnv names a file: while it exists, the server refuses to start,
	// so that a test can keep it down.
	DownEnv = "SUPEREGO_TEST_MCP_DOWN"
	// SecretEnv is a variable the server prints to its standard error
	// when it starts, as a careless server might print its token.
	SecretEnv = "SUPEREGO_TEST_MCP_SECRET"
	// LogEnv names the file each call of send, hold, save and stash is
	// written to.
	LogEnv = "SUPEREGO_TEST_MCP_LOG"
	// LingerEnv, set, keeps the server's process running once its client
	// has gone, as a server with work of its own would, until it is killed.
	LingerEnv = "SUPEREGO_TEST_MCP_LINGER"
	// PidsEnv names a file: set, the server starts a process of its own,
	// given the server's standard input, which it never reads (its end
	// does not end it), and ignoring SIGHUP; and writes "SERVER CHILD",
	// their process ids, to the file before it serves.
	PidsEnv = "SUPEREGO_TEST_MCP_PIDS"
)

// PageFile is the file fetch reads for url: beside LogEnv's file, named
// for the url.
func PageFile(log, url string) string {
	return log + ".page." + neturl.QueryEscape(url)
}

// Calls reads the calls LogEnv's file holds: "TOOL\tARGUMENTS" lines,
// whole ones only, since a server may be killed while it writes one.
func Calls(tb testing.TB, log string) []string {
	tb.Helper()
	b, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	whole := string(b[:bytes.LastIndexByte(b, '\n')+1])
	if whole == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(whole, "\n"), "\n")
}

// logCall writes a call to LogEnv's file, and syncs it: the process may be
// killed the next moment.
func logCall(tool string, in any) error {
	path := os.Getenv(LogEnv)
	if path == "" {
		return nil
	}
	args, _ := json.Marshal(in)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s\t%s\n", tool, args); err != nil {
		return err
	}
	return f.Sync()
}

type url struct {
	URL string `json:"url" jsonschema:"the page's address"`
}

type message struct {
	To   string `json:"to" jsonschema:"where to send it"`
	Body string `json:"body" jsonschema:"what to send"`
}

type text struct {
	Text string `json:"text" jsonschema:"the text"`
}

type file struct {
	Path    any    `json:"path" jsonschema:"where to save it"`
	Content string `json:"content" jsonschema:"what to save"`
}

type echo struct {
	Text string `json:"text" jsonschema:"the text"`
	Fail bool   `json:"fail,omitempty" jsonschema:"answer the text as an error"`
}

type name struct {
	Name string `json:"name" jsonschema:"an environment variable's name"`
}

// NewServer is the test server.
func NewServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "1"}, nil)
	addBase(s)
	return s
}

// NewActionsServer is the test server with the tools of judged actions.
func NewActionsServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptest-actions", Version: "1"}, nil)
	addBase(s)
	addActions(s)
	return s
}

func result(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func addBase(s *mcp.Server) {
	closed := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(bool)}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Returns its text.", Annotations: closed},
		func(_ context.Context, _ *mcp.CallToolRequest, in echo) (*mcp.CallToolResult, any, error) {
			if in.Fail {
				fmt.Fprintln(os.Stderr, "mcptest: failing with", in.Text)
				r := result(in.Text)
				r.IsError = true
				return r, nil, nil
			}
			return result(in.Text), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add_note", Description: "Adds a note."},
		func(_ context.Context, _ *mcp.CallToolRequest, in text) (*mcp.CallToolResult, any, error) {
			return result("noted: " + in.Text), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "The server's process id.", Annotations: closed},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return result(strconv.Itoa(os.Getpid())), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "Whether a variable is set.", Annotations: closed},
		func(_ context.Context, _ *mcp.CallToolRequest, in name) (*mcp.CallToolResult, any, error) {
			_, ok := os.LookupEnv(in.Name)
			return result(strconv.FormatBool(ok)), nil, nil
		})
}

func addActions(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "fetch", Description: "Reads a web page.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in url) (*mcp.CallToolResult, any, error) {
			page, err := os.ReadFile(PageFile(os.Getenv(LogEnv), in.URL))
			if err != nil {
				return nil, nil, fmt.Errorf("no page at %s", in.URL)
			}
			return result(string(page)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "send", Description: "Sends a message."},
		func(_ context.Context, _ *mcp.CallToolRequest, in message) (*mcp.CallToolResult, any, error) {
			if err := logCall("send", in); err != nil {
				return nil, nil, err
			}
			return result("sent to " + in.To), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "save", Description: "Saves a file."},
		func(_ context.Context, _ *mcp.CallToolRequest, in file) (*mcp.CallToolResult, any, error) {
			if err := logCall("save", in); err != nil {
				return nil, nil, err
			}
			return result("saved"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "stash", Description: "Stashes a text.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(bool)}},
		func(_ context.Context, _ *mcp.CallToolRequest, in text) (*mcp.CallToolResult, any, error) {
			if err := logCall("stash", in); err != nil {
				return nil, nil, err
			}
			return result("stashed"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "hold", Description: "Starts a long task."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in text) (*mcp.CallToolResult, any, error) {
			if err := logCall("hold", in); err != nil {
				return nil, nil, err
			}
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
}

// Main serves the test server over stdio, and exits, when the test binary
// was started as one by Command; it runs the binary as what else it was
// started as (a server's keeper, tools.KeeperMain; the child PidsEnv asks
// for); otherwise it returns at once. Call it first in TestMain.
func Main() {
	tools.KeeperMain()
	kind := os.Getenv(childEnv)
	if kind == "stay" {
		signal.Ignore(syscall.SIGHUP)
		for {
			time.Sleep(time.Hour)
		}
	}
	if kind != "1" && kind != "actions" {
		return
	}
	if down := os.Getenv(DownEnv); down != "" {
		if _, err := os.Stat(down); err == nil {
			fmt.Fprintln(os.Stderr, "mcptest: kept down by", down)
			os.Exit(1)
		}
	}
	if secret := os.Getenv(SecretEnv); secret != "" {
		fmt.Fprintln(os.Stderr, "mcptest: starting with token", secret)
	}
	if pids := os.Getenv(PidsEnv); pids != "" {
		if err := startChild(pids); err != nil {
			fmt.Fprintln(os.Stderr, "mcptest:", err)
			os.Exit(1)
		}
	}
	s := NewServer()
	if kind == "actions" {
		s = NewActionsServer()
	}
	err := s.Run(context.Background(), &mcp.StdioTransport{})
	for os.Getenv(LingerEnv) != "" {
		time.Sleep(time.Hour)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// startChild starts the test binary again as a child that stays, and
// writes its process id and the child's to pids.
func startChild(pids string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.Command(exe)
	child.Env = append(os.Environ(), childEnv+"=stay")
	child.Stdin = os.Stdin
	if err := child.Start(); err != nil {
		return err
	}
	return os.WriteFile(pids, fmt.Appendf(nil, "%d %d\n", os.Getpid(), child.Process.Pid), 0o644)
}

// Pids reads the file PidsEnv names: the process ids of the server and of
// its child, which are running as it serves.
func Pids(tb testing.TB, file string) (server, child int) {
	tb.Helper()
	b, err := os.ReadFile(file)
	if _, err2 := fmt.Sscanf(string(b), "%d %d", &server, &child); err != nil || err2 != nil || Gone(server) || Gone(child) {
		tb.Fatalf("the server's and its child's pids: %q %v %v", b, err, err2)
	}
	return server, child
}

// WaitGone waits, for at most within, until every process of pids has
// ended, and fails the test if one has not.
func WaitGone(tb testing.TB, within time.Duration, pids ...int) {
	tb.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		left := slices.DeleteFunc(slices.Clone(pids), Gone)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %s, of the processes %v, %v still run", within, pids, left)
		}
	}
}

// Gone reports whether a process has ended: there is no such process, or
// it is a zombie that no one has reaped yet.
func Gone(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return true
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil { // no /proc here, or it has just been reaped
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	_, state, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(state, "Z")
}

// ExitAtOnce has the children a test binary starts of itself (servers,
// commands, MCP servers) skip the race detector's sleep at exit: built with
// -race, each sleeps a second after main returns (GORACE atexit_sleep_ms),
// for goroutines still running to report races. They exit after an orderly
// shutdown, so it waits for nothing, and a suite that starts dozens of
// them waited dozens of seconds. A race they find is still reported, and
// still fails them (exit status 66). Call it in TestMain.
func ExitAtOnce() {
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
}

// Command is an mcp.json server that starts the test binary as the test
// server over stdio, with env added to its environment.
func Command(tb testing.TB, name string, env map[string]string) tools.MCPServer {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	all := map[string]string{childEnv: "1"}
	for k, v := range env {
		all[k] = v
	}
	return tools.MCPServer{Name: name, Command: exe, Env: all}
}

// Handler serves the test server over streamable HTTP.
func Handler() http.Handler {
	s := NewServer()
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}

// ActionsHandler serves the actions server over streamable HTTP.
func ActionsHandler() http.Handler {
	s := NewActionsServer()
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}
