package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"superego/tools"
)

func call(t *testing.T, set tools.Set, ctx context.Context, name string, args map[string]string) (string, error) {
	t.Helper()
	raw, _ := json.Marshal(args)
	return set[name].Call(ctx, raw)
}

func TestWorkspaceTools(t *testing.T) {
	t.Parallel()
	ws := &tools.Workspaces{Root: t.TempDir()}
	set := ws.Tools()
	ctx := tools.WithInstance(context.Background(), "inst-1")

	if out, err := call(t, set, ctx, "write_file", map[string]string{"path": "notes/plan.md", "content": "step one"}); err != nil || out != "wrote 8 bytes to notes/plan.md" {
		t.Fatalf("write: %q %v", out, err)
	}
	if out, err := call(t, set, ctx, "read_file", map[string]string{"path": "notes/plan.md"}); err != nil || out != "step one" {
		t.Errorf("read: %q %v", out, err)
	}
	call(t, set, ctx, "write_file", map[string]string{"path": "a.txt", "content": "x"})
	if out, err := call(t, set, ctx, "list_files", nil); err != nil || out != "a.txt\t1 bytes\nnotes/plan.md\t8 bytes" {
		t.Errorf("list: %q %v", out, err)
	}
	if out, err := call(t, set, ctx, "list_files", map[string]string{"path": "notes"}); err != nil || out != "notes/plan.md\t8 bytes" {
		t.Errorf("list notes: %q %v", out, err)
	}
	if _, err := call(t, set, ctx, "delete_file", map[string]string{"path": "a.txt"}); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, err := call(t, set, ctx, "read_file", map[string]string{"path": "a.txt"}); err == nil || !strings.Contains(err.Error(), "no file a.txt") {
		t.Errorf("read deleted: %v", err)
	}
	// Another instance sees none of it.
	other := tools.WithInstance(context.Background(), "inst-2")
	if out, _ := call(t, set, other, "list_files", nil); out != "(no files)" {
		t.Errorf("another instance's workspace: %q", out)
	}
	if _, err := call(t, set, context.Background(), "list_files", nil); err == nil {
		t.Error("a tool call without an instance worked")
	}
}

func TestWorkspaceLimits(t *testing.T) {
	t.Parallel()
	ws := &tools.Workspaces{Root: t.TempDir(), MaxFile: 10, MaxTotal: 25}
	set := ws.Tools()
	ctx := tools.WithInstance(context.Background(), "i")
	if _, err := call(t, set, ctx, "write_file", map[string]string{"path": "big", "content": strings.Repeat("x", 11)}); err == nil || !strings.Contains(err.Error(), "more than a file may hold") {
		t.Errorf("file over the limit: %v", err)
	}
	for _, name := range []string{"a", "b"} {
		if _, err := call(t, set, ctx, "write_file", map[string]string{"path": name, "content": strings.Repeat("x", 10)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := call(t, set, ctx, "write_file", map[string]string{"path": "c", "content": strings.Repeat("x", 10)}); err == nil || !strings.Contains(err.Error(), "more than its limit") {
		t.Errorf("workspace over the limit: %v", err)
	}
	// Replacing a file counts its new size, not both.
	if _, err := call(t, set, ctx, "write_file", map[string]string{"path": "a", "content": strings.Repeat("y", 10)}); err != nil {
		t.Errorf("replacing a file: %v", err)
	}
}

// Every tool refuses a path that leaves the workspace, however it tries.
func TestWorkspacePathEscapes(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("SECRET"), 0o644)
	ws := &tools.Workspaces{Root: root}
	set := ws.Tools()
	ctx := tools.WithInstance(context.Background(), "i")
	call(t, set, ctx, "write_file", map[string]string{"path": "keep", "content": "k"}) // makes the workspace
	dir := filepath.Join(root, "i")
	os.Symlink(outside, filepath.Join(dir, "link"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "secret-link"))

	escapes := []string{
		"../x", "../../etc/passwd", "a/../../x", "..", "/etc/passwd", outside + "/secret",
		"link/secret", "link/new", "secret-link", "a\x00b",
	}
	for _, tool := range []string{"write_file", "read_file", "list_files", "delete_file"} {
		for _, p := range escapes {
			out, err := call(t, set, ctx, tool, map[string]string{"path": p, "content": "pwned"})
			if err == nil || strings.Contains(out, "SECRET") {
				t.Errorf("%s %q: %q, %v", tool, p, out, err)
			}
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "SECRET" {
		t.Error("a file outside the workspace was changed")
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Error("a file was made outside the workspace")
	}
	if _, err := ws.Resolve("i", "../x"); !errors.Is(err, tools.ErrOutside) {
		t.Errorf("Resolve: %v", err)
	}
	if _, err := ws.Resolve("../i", "x"); err == nil {
		t.Error("an instance id with a path in it was taken")
	}
}
