package debugserver

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"strconv"
)

// EnvAddr names the environment variable ListenFromEnv reads.
const EnvAddr = "LOADBENCH_DEBUG_ADDR"

// ReadyPrefix starts the line ListenFromEnv writes once it listens, followed
// by the address: the harness reads it from the process's stderr.
const ReadyPrefix = "loadbench-debug addr="

// GoroutinesPath answers with runtime.NumGoroutine() as a decimal number.
const GoroutinesPath = "/debug/goroutines"

// MemPath answers with Mem as JSON.
const MemPath = "/debug/mem"

// Mem is where a process's memory is, from runtime.ReadMemStats: what the
// resident set size does not break down.
type Mem struct {
	// HeapInuse is the bytes in in-use heap spans.
	HeapInuse uint64 `json:"heap_inuse"`
	// StackInuse is the bytes of goroutine stacks.
	StackInuse uint64 `json:"stack_inuse"`
	// NumGC is the number of completed GC cycles.
	NumGC uint32 `json:"num_gc"`
}

// Handler serves GoroutinesPath, MemPath and net/http/pprof under
// /debug/pprof/.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(GoroutinesPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, strconv.Itoa(runtime.NumGoroutine()))
	})
	mux.HandleFunc(MemPath, func(w http.ResponseWriter, _ *http.Request) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(Mem{HeapInuse: ms.HeapInuse, StackInuse: ms.StackInuse, NumGC: ms.NumGC})
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Start serves Handler on addr (host:port; port 0 picks one) in the
// background and returns the address it listens on. The listener lives as
// long as the process: it is only ever started in benchmark processes.
func Start(addr string) (string, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: Handler()}
	go func() { _ = srv.Serve(lis) }()
	return lis.Addr().String(), nil
}

// ListenFromEnv starts the server on the address in EnvAddr, when that is
// set, and writes ReadyPrefix and the address to stderr. It does nothing
// when EnvAddr is empty; a failure is written to stderr, and the process
// runs on without it, since it only serves the benchmark's readings.
func ListenFromEnv() {
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		return
	}
	got, err := Start(addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadbench-debug error=%v\n", err)
		return
	}
	fmt.Fprintf(os.Stderr, "%s%s\n", ReadyPrefix, got)
}
