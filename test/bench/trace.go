package main

import (
	"context"
	"io"
	"net"
	"net/http"
)

// otlpSink starts, once, an OTLP/HTTP endpoint that reads and discards
// every export (a collector that keeps up), and returns its URL.
func (b *bench) otlpSink() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sinkURL != "" {
		return b.sinkURL, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	})}
	go func() { _ = srv.Serve(ln) }()
	b.cleanups = append(b.cleanups, func(ctx context.Context) { _ = srv.Shutdown(ctx) })
	b.sinkURL = "http://" + ln.Addr().String()
	return b.sinkURL, nil
}
