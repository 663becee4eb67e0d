package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

func get(t *testing.T, url, auth string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// -metrics-addr serves /metrics on an address of its own (not on the main one,
// without a token); with -metrics-token it asks for the token there too.
func TestMetricsOnSeparateAddress(t *testing.T) {
	for _, token := range []string{"", "a-metrics-token-0123456789"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		a := startApp(t, map[string]string{"ATRIUM_METRICS_ADDR": addr, "ATRIUM_METRICS_TOKEN": token})
		code, body := get(t, "http://"+addr+"/metrics", "")
		if token == "" {
			if code != http.StatusOK || !strings.Contains(body, "atrium_websockets_open 0") {
				t.Errorf("metrics address: %d\n%.300s", code, body)
			}
			// Not served on the main address (before setup, that answers with the setup page).
			if code, body := get(t, a.URL+"/metrics", ""); strings.Contains(body, "atrium_") {
				t.Errorf("main address without a token served metrics: %d", code)
			}
		} else {
			if code != http.StatusUnauthorized {
				t.Errorf("metrics address without the token: %d, want 401", code)
			}
			if code, body := get(t, "http://"+addr+"/metrics", "Bearer "+token); code != http.StatusOK || !strings.Contains(body, "atrium_") {
				t.Errorf("metrics address with the token: %d", code)
			}
		}
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
	}
}
