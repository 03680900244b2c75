package mock

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/completiond/completiond/bench/debugserver"
)

// ReadyPrefix starts the line Main writes to stdout once it serves,
// followed by its base URL (http://host:port).
const ReadyPrefix = "loadbench-mock url="

// Main runs the mock as a process until ctx ends: flags -addr (default
// 127.0.0.1:0) and -debug-addr (goroutines and pprof; empty: off).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mock", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	debugAddr := fs.String("debug-addr", "", "serve goroutine counts and pprof here (empty: off)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *debugAddr != "" {
		if _, err := debugserver.Start(*debugAddr); err != nil {
			return err
		}
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	s := New()
	srv := &http.Server{Handler: s, ConnState: s.ConnState, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	fmt.Fprintf(stdout, "%shttp://%s\n", ReadyPrefix, lis.Addr())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
