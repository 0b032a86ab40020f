package postgres_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"superego/flow"
	"superego/postgres"
	"superego/postgres/pgtest"
)

// cutter is a TCP proxy in front of PostgreSQL that, once armed, drops a
// connection at its next commit: the end of a pipeline that executed
// something (a Sync after an Execute) outside a BEGIN, or a COMMIT. "before" drops it
// without passing the commit on, so the transaction is rolled back; "after"
// passes it on and drops the connection once the server has answered
// (ReadyForQuery), without passing the answer back, so the transaction is
// committed and the client cannot know.
type cutter struct {
	ln     net.Listener
	target string

	mu   sync.Mutex
	mode string        // "", "before" or "after"
	cut  chan struct{} // closed when the armed cut is made
}

func newCutter(t *testing.T, target string) *cutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go c.relay(client)
		}
	}()
	return c
}

// arm makes the next commit's connection drop, as mode says.
func (c *cutter) arm(mode string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mode, c.cut = mode, make(chan struct{})
	return c.cut
}

// take disarms the cutter and says how it was armed.
func (c *cutter) take() (string, chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	mode, cut := c.mode, c.cut
	c.mode = ""
	return mode, cut
}

func (c *cutter) relay(client net.Conn) {
	server, err := net.Dial("tcp", c.target)
	if err != nil {
		client.Close()
		return
	}
	var once sync.Once
	closeBoth := func() { once.Do(func() { client.Close(); server.Close() }) }
	defer closeBoth()
	swallow := make(chan chan struct{}, 1) // an "after" cut: drop the answer, then the connection

	go func() { // server to client
		defer closeBoth()
		var cut chan struct{}
		for {
			typ, msg, err := readMessage(server, true)
			if err != nil {
				return
			}
			select {
			case cut = <-swallow:
			default:
			}
			if cut == nil {
				if _, err := client.Write(msg); err != nil {
					return
				}
				continue
			}
			if typ == 'Z' { // the server answered the commit: it is done
				close(cut)
				closeBoth()
				return
			}
		}
	}()

	// The startup message has no type byte.
	_, startup, err := readMessage(client, false)
	if err != nil || writeAll(server, startup) != nil {
		return
	}
	executed, inTx := false, false
	for {
		typ, msg, err := readMessage(client, true)
		if err != nil {
			return
		}
		query := func(q string) bool { return typ == 'Q' && bytes.HasPrefix(bytes.ToLower(msg[5:]), []byte(q)) }
		commit := typ == 'S' && executed && !inTx || query("commit")
		executed = typ == 'E' || executed && typ != 'S'
		inTx = query("begin") || inTx && !query("commit") && !query("rollback")
		if commit {
			switch mode, cut := c.take(); mode {
			case "before":
				close(cut)
				closeBoth()
				return
			case "after":
				swallow <- cut
			}
		}
		if writeAll(server, msg) != nil {
			return
		}
	}
}

// readMessage reads one protocol message whole: a type byte (unless typed
// is false, for the startup message) and a length that counts itself.
func readMessage(r io.Reader, typed bool) (byte, []byte, error) {
	head := make([]byte, 4)
	var typ byte
	if typed {
		head = make([]byte, 5)
	}
	if _, err := io.ReadFull(r, head); err != nil {
		return 0, nil, err
	}
	if typed {
		typ = head[0]
	}
	n := int(binary.BigEndian.Uint32(head[len(head)-4:])) - 4
	if n < 0 || n > 1<<30 {
		return 0, nil, fmt.Errorf("message length %d", n)
	}
	msg := make([]byte, len(head)+n)
	copy(msg, head)
	_, err := io.ReadFull(r, msg[len(head):])
	return typ, msg, err
}

func writeAll(w io.Writer, b []byte) error {
	_, err := w.Write(b)
	return err
}

// A commit whose connection drops before the server's answer is found to
// have landed, or not, and the write goes on as if nothing happened: none
// is lost, none made twice, whether the server committed it ("after") or
// never got the COMMIT ("before"), for a batch's implicit transaction
// (events, held events) and for an explicit one (a write with a
// transaction of its own, as replicas' dispatches are).
func TestCommitWhoseConnectionDrops(t *testing.T) {
	now := time.Now().UTC()
	next := "a"
	event := func(id int64) flow.Event {
		return flow.Event{ID: id, Name: flow.EventCompleteStep, Time: now, Data: &flow.Step{StepID: fmt.Sprint(id), AgentID: "user", Role: flow.RoleUser, Timestamp: now, Response: "hi", NextAgent: &next}}
	}
	for _, c := range []struct {
		write string
		mode  string
	}{
		{"append", "after"}, {"append", "before"},
		{"hold", "after"}, {"hold", "before"},
		{"with a transaction", "after"}, {"with a transaction", "before"},
	} {
		t.Run(c.write+", dropped "+c.mode+" the commit", func(t *testing.T) {
			ctx := context.Background()
			u, db := pgtest.Database(t)
			parsed, _ := url.Parse(u)
			proxy := newCutter(t, parsed.Host)
			parsed.Host = proxy.ln.Addr().String()
			s, err := postgres.Open(ctx, parsed.String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if _, err := db.Exec(ctx, `CREATE TABLE probe (n int)`); err != nil {
				t.Fatal(err)
			}
			if err := flow.Wait(func(done func(error)) { s.Create(flow.Instance{ID: "i", FlowID: "f", CreatedAt: now}, done) }); err != nil {
				t.Fatal(err)
			}
			// A first write through the same path, so that the statements
			// are prepared before the cut, as they are in a server that ran.
			write := func(id int64) error {
				return flow.Wait(func(done func(error)) {
					switch c.write {
					case "append":
						s.Append("i", []flow.Event{event(id)}, done)
					case "hold":
						s.Hold("i", event(id), done)
					default:
						s.Begin(nil, "i", []flow.Event{event(id)}, func(ctx context.Context, tx pgx.Tx) error {
							_, err := tx.Exec(ctx, `INSERT INTO probe VALUES ($1)`, id)
							return err
						}, done)
					}
				})
			}
			if err := write(1); err != nil {
				t.Fatal(err)
			}
			cut := proxy.arm(c.mode)
			if err := write(2); err != nil {
				t.Errorf("the write whose commit's connection dropped: %v", err)
			}
			select {
			case <-cut:
			default:
				t.Fatal("the proxy never cut the connection")
			}
			if err := write(3); err != nil {
				t.Errorf("the next write: %v", err)
			}
			var got string
			switch c.write {
			case "hold":
				held, err := s.Held(ctx, "i")
				if err != nil {
					t.Fatal(err)
				}
				got = fmt.Sprint(ids(held, func(e flow.Event) string { return e.Data.(*flow.Step).StepID }))
			default:
				events, err := s.Events(ctx, "i", 0)
				if err != nil {
					t.Fatal(err)
				}
				got = fmt.Sprint(ids(events, func(e flow.Event) string { return fmt.Sprint(e.ID) }))
			}
			if got != "[1 2 3]" {
				t.Errorf("written: %s, want [1 2 3], each once", got)
			}
			if c.write == "with a transaction" {
				var rows []int
				r, _ := db.Query(ctx, `SELECT n FROM probe ORDER BY n`)
				rows, _ = pgx.CollectRows(r, pgx.RowTo[int])
				if fmt.Sprint(rows) != "[1 2 3]" {
					t.Errorf("the transaction's own rows: %v, want [1 2 3]", rows)
				}
			}
		})
	}
}

func ids(events []flow.Event, id func(flow.Event) string) []string {
	var out []string
	for _, e := range events {
		out = append(out, id(e))
	}
	return out
}
