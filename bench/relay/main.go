package relay

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/completiond/completiond/bench/debugserver"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// ReadyPrefix starts the line Main writes to stdout once it serves,
// followed by its gRPC address.
const ReadyPrefix = "loadbench-relay addr="

// stopGrace bounds the graceful stop at the end of Main.
const stopGrace = 2 * time.Second

// Main runs the relay as a process until ctx ends. Flags: -addr (default
// 127.0.0.1:0), -upstream (base URL with /v1), -model, -api-key; the
// goroutine and pprof server starts when debugserver.EnvAddr is set, as in
// completiond's benchmark build.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "gRPC listen address")
	var cfg Config
	fs.StringVar(&cfg.BaseURL, "upstream", "", "the upstream's Chat Completions base URL, with /v1")
	fs.StringVar(&cfg.Model, "model", "", "the upstream model of every request")
	fs.StringVar(&cfg.APIKey, "api-key", "sk-loadbench", "bearer token for the upstream")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.BaseURL == "" || cfg.Model == "" {
		return fmt.Errorf("relay: -upstream and -model are required")
	}
	debugserver.ListenFromEnv()
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	completionv1.RegisterCompletionServer(g, New(cfg))
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	fmt.Fprintf(stdout, "%s%s\n", ReadyPrefix, lis.Addr())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(stopGrace):
		g.Stop()
	}
	return nil
}
