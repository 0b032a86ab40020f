package api

import (
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"github.com/go-chi/chi/v5"

	"superego/flow"
	"superego/tools"
)

// file serves GET /flow/instances/{id}/files/{path}: a file of the
// instance's workspace, confined as the workspace tools are. Files are
// sent as attachments, never rendered: a model wrote them.
func (s *Server) file(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	if _, err := s.Engine.Store.Get(r.Context(), id); err != nil {
		return err
	}
	rel, err := url.PathUnescape(chi.URLParam(r, "*"))
	if err != nil {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_path", Message: "the path is not valid URL encoding"}
	}
	if s.Workspaces == nil {
		return fmt.Errorf("instance %s has no workspace: %w", id, flow.ErrNotFound)
	}
	p, err := s.Workspaces.Resolve(id, rel)
	if errors.Is(err, tools.ErrOutside) {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_path", Message: err.Error()}
	}
	var f *os.File
	if err == nil {
		f, err = os.Open(p)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no file %q in the workspace of instance %s: %w", rel, id, flow.ErrNotFound)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || info.IsDir() {
		return fmt.Errorf("no file %q in the workspace of instance %s: %w", rel, id, flow.ErrNotFound)
	}
	ctype := mime.TypeByExtension(filepath.Ext(p))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filepath.Base(p)}))
	http.ServeContent(w, r, "", info.ModTime(), f)
	return nil
}
