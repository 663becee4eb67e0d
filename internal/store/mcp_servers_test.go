package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"atrium/internal/errs"
	"atrium/internal/store"
)

func TestMCPServers(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	fs := store.MCPServer{Name: "fs", Transport: store.MCPStdio, Enabled: true,
		Config:        []byte(`{"command":"npx","args":["-y","@modelcontextprotocol/server-filesystem","/tmp"],"env_keys":["TOKEN"]}`),
		SecretsSealed: []byte{1, 2, 3}}
	mustNil(t, db.CreateMCPServer(ctx, &fs))
	remote := store.MCPServer{Name: "remote", Transport: store.MCPHTTP}
	mustNil(t, db.CreateMCPServer(ctx, &remote))
	if fs.ID == 0 || remote.ID == 0 || fs.ID == remote.ID || fs.CreatedAt.IsZero() {
		t.Fatalf("create did not set id/timestamps: %+v %+v", fs, remote)
	}

	t.Run("read back", func(t *testing.T) {
		got, err := db.MCPServerByID(ctx, fs.ID)
		mustNil(t, err)
		if got.Name != "fs" || got.Transport != store.MCPStdio || !got.Enabled || string(got.Config) != string(fs.Config) ||
			string(got.SecretsSealed) != "\x01\x02\x03" || !got.CreatedAt.Equal(fs.CreatedAt) {
			t.Errorf("got %+v", got)
		}
		got, err = db.MCPServerByID(ctx, remote.ID)
		mustNil(t, err)
		if string(got.Config) != "{}" || got.SecretsSealed != nil || got.Enabled {
			t.Errorf("defaults: %+v", got)
		}
		_, err = db.MCPServerByID(ctx, 999)
		wantCode(t, err, errs.NotFound)
	})
	t.Run("invalid and conflict", func(t *testing.T) {
		for _, s := range []store.MCPServer{
			{Name: "", Transport: store.MCPStdio},
			{Name: "x", Transport: "websocket"},
			{Name: "x", Transport: store.MCPSSE, Config: []byte(`[1]`)},
			{Name: "x", Transport: store.MCPSSE, Config: []byte(`{bad`)},
		} {
			wantCode(t, db.CreateMCPServer(ctx, &s), errs.Invalid)
		}
		err := db.CreateMCPServer(ctx, &store.MCPServer{Name: "fs", Transport: store.MCPSSE})
		wantCode(t, err, errs.Conflict)
		if msg := errs.Message(err); !strings.Contains(msg, `"fs"`) {
			t.Errorf("conflict message %q does not name the server", msg)
		}
		dup := remote
		dup.Name = "FS"
		wantCode(t, db.UpdateMCPServer(ctx, dup), errs.Conflict)
	})
	t.Run("update", func(t *testing.T) {
		up := fs
		up.Transport = store.MCPSSE
		up.Config = []byte(`{"url":"https://example.com/sse"}`)
		up.SecretsSealed = nil
		up.Enabled = false
		mustNil(t, db.UpdateMCPServer(ctx, up))
		got, err := db.MCPServerByID(ctx, fs.ID)
		mustNil(t, err)
		if got.Transport != store.MCPSSE || string(got.Config) != string(up.Config) || got.SecretsSealed != nil || got.Enabled ||
			!got.UpdatedAt.After(fs.UpdatedAt) || !got.CreatedAt.Equal(fs.CreatedAt) {
			t.Errorf("after update %+v", got)
		}
		wantCode(t, db.UpdateMCPServer(ctx, store.MCPServer{ID: 999, Name: "n", Transport: store.MCPStdio}), errs.NotFound)
	})
	t.Run("enable", func(t *testing.T) {
		before, err := db.MCPServerByID(ctx, remote.ID)
		mustNil(t, err)
		mustNil(t, db.SetMCPServerEnabled(ctx, remote.ID, true))
		got, err := db.MCPServerByID(ctx, remote.ID)
		mustNil(t, err)
		if !got.Enabled || !got.UpdatedAt.After(before.UpdatedAt) {
			t.Errorf("after enable %+v", got)
		}
		mustNil(t, db.SetMCPServerEnabled(ctx, remote.ID, false))
		got, err = db.MCPServerByID(ctx, remote.ID)
		mustNil(t, err)
		if got.Enabled {
			t.Errorf("still enabled")
		}
		wantCode(t, db.SetMCPServerEnabled(ctx, 999, true), errs.NotFound)
	})
	t.Run("list by name and delete", func(t *testing.T) {
		a := store.MCPServer{Name: "alpha", Transport: store.MCPHTTP, Enabled: true}
		mustNil(t, db.CreateMCPServer(ctx, &a))
		list, err := db.ListMCPServers(ctx)
		mustNil(t, err)
		var names []string
		for _, s := range list {
			names = append(names, s.Name)
		}
		if strings.Join(names, ",") != "alpha,fs,remote" {
			t.Errorf("list = %v", names)
		}
		mustNil(t, db.DeleteMCPServer(ctx, fs.ID))
		wantCode(t, db.DeleteMCPServer(ctx, fs.ID), errs.NotFound)
		_, err = db.MCPServerByID(ctx, fs.ID)
		wantCode(t, err, errs.NotFound)
		// The name is free again.
		again := store.MCPServer{Name: "fs", Transport: store.MCPStdio}
		mustNil(t, db.CreateMCPServer(ctx, &again))
	})
}

// TestSaveMCPServer: the row and its sealed secrets are written in one transaction,
// sealed to the new row's id; a failed seal leaves no server behind.
func TestSaveMCPServer(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	s := store.MCPServer{Name: "srv", Transport: store.MCPStdio, Enabled: true}
	var sealedFor int64
	mustNil(t, db.SaveMCPServer(ctx, &s, func(id int64) ([]byte, error) {
		sealedFor = id
		return []byte("sealed"), nil
	}))
	got, err := db.MCPServerByID(ctx, s.ID)
	mustNil(t, err)
	if s.ID == 0 || sealedFor != s.ID || string(got.SecretsSealed) != "sealed" {
		t.Fatalf("saved %+v (sealed for %d), stored %+v", s, sealedFor, got)
	}

	failed := store.MCPServer{Name: "broken", Transport: store.MCPStdio}
	if err := db.SaveMCPServer(ctx, &failed, func(int64) ([]byte, error) { return nil, errors.New("no key") }); err == nil {
		t.Fatal("a failed seal saved the server")
	}
	rows, err := db.ListMCPServers(ctx)
	mustNil(t, err)
	if len(rows) != 1 {
		t.Fatalf("%d servers after a failed seal, want 1", len(rows))
	}

	s.Name = "renamed"
	mustNil(t, db.SaveMCPServer(ctx, &s, nil))
	got, _ = db.MCPServerByID(ctx, s.ID)
	if got.Name != "renamed" || string(got.SecretsSealed) != "sealed" {
		t.Fatalf("update without a seal should keep the row's secrets as given: %+v", got)
	}
	dup := store.MCPServer{Name: "RENAMED", Transport: store.MCPStdio}
	wantCode(t, db.SaveMCPServer(ctx, &dup, nil), errs.Conflict)
}
