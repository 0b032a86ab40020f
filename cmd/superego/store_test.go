package main

import (
	"net"
	"strings"
	"superego/postgres/pgtest"
	"syscall"
	"testing"
)

// --db postgres://… serves: a run killed midway resumes on the next start,
// from the PostgreSQL log, and export reads it, hidden fields only when
// asked for.
func TestKillNineMidRunThenResumeOnPostgres(t *testing.T) {
	t.Parallel()
	db, _ := pgtest.Database(t)
	dir := writeFlows(t)
	model := newGatedModel(t)
	first := startServer(t, dir, model, "--db", db)
	id := startRun(t, first.addr)
	<-model.entered
	first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	model.open()

	second := startServer(t, dir, model, "--db", db)
	checkCompletedOnce(t, history(t, second.addr, id))
	second.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-second.done; err != nil {
		t.Errorf("SIGTERM exit: %v", err)
	}

	code, out, errs := runCmd(t, env("SUPEREGO_DB", db), "export")
	if code != 0 || errs != "" || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"status":"completed"`) {
		t.Fatalf("export: %d %q\n%s", code, errs, out)
	}
	if strings.Contains(out, "HIDDEN-") || strings.Contains(out, `"thinking"`) {
		t.Errorf("export without --include-hidden leaks:\n%s", out)
	}
	_, full, _ := runCmd(t, env("SUPEREGO_DB", db), "export", "--include-hidden")
	if !strings.Contains(full, `"thinking":"HIDDEN-THINKING"`) || !strings.Contains(full, `"agent_guidance":"HIDDEN-GUIDANCE"`) {
		t.Errorf("export --include-hidden lacks the hidden fields:\n%s", full)
	}
}

// A --db URL the store cannot use, or a server that is not there, stops
// the command with the reason, and without the password.
func TestBadOrUnreachablePostgresStopsTheCommand(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close() // nothing listens there now
	for _, c := range []struct {
		cmd, db string
		code    int
		want    string
	}{
		{"export", "postgres://superego:s3cret@127.0.0.1:notaport/db", exitUsage,
			"superego export: open the PostgreSQL database: cannot parse `postgres://superego:xxxxx@127.0.0.1:notaport/db`: invalid port\n"},
		{"serve", "postgresql://superego:s3cret@127.0.0.1:" + port + "/db?sslmode=disable", exitFailed,
			"superego: open postgresql://superego:xxxxx@127.0.0.1:" + port + "/db?sslmode=disable: failed to connect to `user=superego database=db`: 127.0.0.1:" + port + " (127.0.0.1): dial error: dial tcp 127.0.0.1:" + port + ": connect: connection refused\n"},
	} {
		code, _, errs := runCmd(t, env("SUPEREGO_DB", c.db, "SUPEREGO_FLOWS", t.TempDir(), "SUPEREGO_ADDR", "127.0.0.1:0"), c.cmd)
		if code != c.code || errs != c.want {
			t.Errorf("%s: exit %d, stderr %q\nwant exit %d, %q", c.cmd, code, errs, c.code, c.want)
		}
	}
}
