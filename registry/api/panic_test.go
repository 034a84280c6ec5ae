package api

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestAMethodThatPanicsAnswersInternal: a method that panics (a bug: a list once
// indexed its shipped profiles with a cursor's number as sent) is answered INTERNAL with
// the generic text, its panic and stack in the registry's log, and the listener serves
// the next call. Before, the connection was dropped with no answer, which the CLI
// reports as a registry it cannot reach.
func TestAMethodThatPanicsAnswersInternal(t *testing.T) {
	st := storetest.Open(t, store.Options{})
	logPath := filepath.Join(t.TempDir(), "registry.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	s := NewServer(st, slog.New(slog.NewTextHandler(logFile, nil)))
	s.Register("test.panic", Method{Call: func(context.Context, *Caller, []byte) (any, error) {
		var shipped []int
		return shipped[-1+len(shipped)], nil // index out of range
	}})
	var secret string
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		if _, err = tx.CreateTenant(store.RootTenant); err != nil {
			return err
		}
		_, secret, err = tx.CreateCredential(store.RootTenant, []string{ActionNodesRead}, time.Now().Add(time.Hour))
		return err
	})
	srv := httptest.NewServer(s)
	defer srv.Close()
	for i := range 2 {
		status, _, e := callAs(t, srv, secret, "test.panic", "application/json", "{}")
		if status != http.StatusInternalServerError || e.Code != proto.Internal || !strings.Contains(e.Message, "the registry's log has the details") {
			t.Fatalf("call %d: %d %s %q, want 500 INTERNAL saying the log has the details", i+1, status, e.Code, e.Message)
		}
		if strings.Contains(e.Message, "index out of range") {
			t.Fatalf("call %d: the answer tells the panic: %q", i+1, e.Message)
		}
	}
	got, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(got, []byte("index out of range")) || !bytes.Contains(got, []byte("callMethod")) {
		t.Fatalf("the log does not hold the panic and its stack:\n%s", got)
	}
}
