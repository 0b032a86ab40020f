package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
)

// Workspaces gives every instance a directory of its own under Root, and
// the tools that work in it. A path a tool is given is relative to the
// instance's directory and may not leave it: not by "..", not as an
// absolute path, not through a symbolic link that points out.
type Workspaces struct {
	Root     string
	MaxFile  int64 // bytes; default 1 MiB
	MaxTotal int64 // bytes a workspace may hold; default 20 MiB
}

type instanceKey struct{}

// WithInstance tells workspace tools, through ctx, whose workspace to use.
func WithInstance(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, instanceKey{}, id)
}

// ErrOutside is the error of a path that would leave its workspace.
var ErrOutside = errors.New("the path leaves the workspace")

var instanceRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (w *Workspaces) limits() (file, total int64) {
	file, total = w.MaxFile, w.MaxTotal
	if file <= 0 {
		file = 1 << 20
	}
	if total <= 0 {
		total = 20 << 20
	}
	return file, total
}

// dir is an instance's workspace; create makes it if it does not exist.
// Only writing creates one: reading an instance's files never does.
func (w *Workspaces) dir(instance string, create bool) (string, error) {
	if !instanceRe.MatchString(instance) {
		return "", fmt.Errorf("no workspace for instance %q", instance)
	}
	d := filepath.Join(w.Root, instance)
	if create {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	return filepath.EvalSymlinks(d)
}

// Resolve turns a path given for an instance's workspace into a path on
// disk inside it, or fails with ErrOutside.
func (w *Workspaces) Resolve(instance, rel string) (string, error) {
	dir, err := w.dir(instance, false)
	if err != nil {
		return "", err
	}
	if rel == "" || strings.ContainsRune(rel, 0) || filepath.IsAbs(rel) || strings.HasPrefix(rel, `\`) || filepath.VolumeName(rel) != "" {
		return "", fmt.Errorf("%w: %q is not a relative path", ErrOutside, rel)
	}
	clean := filepath.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%w: %q", ErrOutside, rel)
	}
	full := filepath.Join(dir, clean)
	// Follow whatever links exist along the path; what is left must still
	// be inside.
	existing, rest := full, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = filepath.Dir(existing)
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", err
	}
	real = filepath.Join(real, rest)
	if real != dir && !strings.HasPrefix(real, dir+string(filepath.Separator)) {
		return "", fmt.Errorf("%w: %q leads outside through a link", ErrOutside, rel)
	}
	return real, nil
}

// Tools are the workspace tools: write_file, read_file, list_files and
// delete_file.
func (w *Workspaces) Tools() Set {
	path := map[string]any{"type": "string", "description": "a path relative to the workspace, such as notes/plan.md"}
	return Set{
		"write_file": {Name: "write_file", Description: "Write a text file in your workspace, replacing it if it exists; folders are created.",
			Parameters: object(map[string]any{"path": path, "content": map[string]any{"type": "string"}}, "path", "content"), Call: w.write, ClosedWorld: true},
		"read_file": {Name: "read_file", Description: "Read a file of your workspace.",
			Parameters: object(map[string]any{"path": path}, "path"), Call: w.read, ReadOnly: true, ClosedWorld: true},
		"list_files": {Name: "list_files", Description: "List the files of your workspace (or of one folder in it), with their sizes.",
			Parameters: object(map[string]any{"path": path}), Call: w.list, ReadOnly: true, ClosedWorld: true},
		"delete_file": {Name: "delete_file", Description: "Delete a file of your workspace.",
			Parameters: object(map[string]any{"path": path}, "path"), Call: w.delete, ClosedWorld: true},
	}
}

type pathArgs struct {
	Path    string
	Content *string
}

// args decodes a workspace tool's arguments and resolves their path;
// defaultPath stands in for a missing one, or "" where it is required.
// The keys are read as given: "PATH" is not "path".
func (w *Workspaces) args(ctx context.Context, raw json.RawMessage, defaultPath string) (instance, p string, a pathArgs, err error) {
	instance, _ = ctx.Value(instanceKey{}).(string)
	if instance == "" {
		return "", "", a, errors.New("workspace tools need a flow instance")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", "", a, fmt.Errorf("arguments: %w", err)
	}
	for key, v := range map[string]any{"path": &a.Path, "content": &a.Content} {
		if m[key] != nil {
			if err := json.Unmarshal(m[key], v); err != nil {
				return "", "", a, fmt.Errorf("argument %q must be a string", key)
			}
		}
	}
	if a.Path == "" {
		if a.Path = defaultPath; a.Path == "" {
			return "", "", a, errors.New(`"path" is required`)
		}
	}
	p, err = w.Resolve(instance, a.Path)
	return instance, p, a, err
}

func (w *Workspaces) write(ctx context.Context, raw json.RawMessage) (string, error) {
	if instance, _ := ctx.Value(instanceKey{}).(string); instance != "" {
		if _, err := w.dir(instance, true); err != nil {
			return "", err
		}
	}
	instance, p, a, err := w.args(ctx, raw, "")
	if err != nil {
		return "", err
	}
	if a.Content == nil {
		return "", errors.New(`"content" is required`)
	}
	maxFile, maxTotal := w.limits()
	if n := int64(len(*a.Content)); n > maxFile {
		return "", fmt.Errorf("%d bytes is more than a file may hold (%d)", n, maxFile)
	}
	dir, _ := w.dir(instance, false)
	total, err := usage(dir, p)
	if err != nil {
		return "", err
	}
	if total+int64(len(*a.Content)) > maxTotal {
		return "", fmt.Errorf("the workspace would hold %d bytes, more than its limit of %d; delete files first", total+int64(len(*a.Content)), maxTotal)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	// O_NOFOLLOW: a link put in place since Resolve is not followed.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(*a.Content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("wrote %d bytes to %s", len(*a.Content), a.Path), nil
}

// usage is the bytes a workspace holds, not counting the file at except.
func usage(dir, except string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == except {
			return err
		}
		if info, err := d.Info(); err == nil {
			total += info.Size()
		}
		return nil
	})
	return total, err
}

func (w *Workspaces) read(ctx context.Context, raw json.RawMessage) (string, error) {
	_, p, a, err := w.args(ctx, raw, "")
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no file %s in the workspace", a.Path)
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "", err
	}
	maxFile, _ := w.limits()
	if info.IsDir() {
		return "", fmt.Errorf("%s is a folder; list_files lists it", a.Path)
	}
	if info.Size() > maxFile {
		return "", fmt.Errorf("%s is %d bytes, more than read_file returns (%d)", a.Path, info.Size(), maxFile)
	}
	b := make([]byte, info.Size())
	_, err = f.ReadAt(b, 0)
	return string(b), err
}

func (w *Workspaces) list(ctx context.Context, raw json.RawMessage) (string, error) {
	_, root, a, err := w.args(ctx, raw, ".")
	if errors.Is(err, fs.ErrNotExist) && filepath.Clean(a.Path) == "." {
		return "(no files)", nil // nothing written yet
	}
	if err != nil {
		return "", err
	}
	var lines []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		lines = append(lines, fmt.Sprintf("%s\t%d bytes", filepath.ToSlash(filepath.Join(a.Path, rel)), info.Size()))
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no folder %s in the workspace", a.Path)
	}
	if err != nil {
		return "", err
	}
	if len(lines) == 0 {
		return "(no files)", nil
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), nil
}

func (w *Workspaces) delete(ctx context.Context, raw json.RawMessage) (string, error) {
	_, p, a, err := w.args(ctx, raw, "")
	if err != nil {
		return "", err
	}
	info, err := os.Lstat(p)
	if err != nil {
		return "", fmt.Errorf("no file %s in the workspace", a.Path)
	}
	if info.IsDir() {
		return "", fmt.Errorf("%s is a folder; delete_file deletes files", a.Path)
	}
	if err := os.Remove(p); err != nil {
		return "", err
	}
	return "deleted " + a.Path, nil
}
