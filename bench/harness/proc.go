package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/completiond/completiond/bench/debugserver"
)

// startTimeout bounds how long a process may take to say it serves.
const startTimeout = 30 * time.Second

// stopTimeout bounds how long a process may take to exit after SIGTERM
// before it is killed.
const stopTimeout = 5 * time.Second

// proc is a child process: a server, or the mock.
type proc struct {
	name  string
	cmd   *exec.Cmd
	pid   int
	addr  string // what it serves on (host:port, or the mock's URL)
	debug string // its debugserver address, "" if none
	// metrics is its Prometheus endpoint's address (completiond's
	// --metrics-addr), "" if none.
	metrics string

	exited  chan struct{} // closed when it exited
	waitErr error

	mu      sync.Mutex
	lines   []string // its last lines of output
	ready   chan struct{}
	isReady func(p *proc) bool
	parse   func(p *proc, line string) // reads the ready lines (under mu)
}

// maxOutputLines bounds the output kept for an error message.
const maxOutputLines = 20

// procSpec says how to start a process and when it is ready.
type procSpec struct {
	name string
	argv []string
	env  []string
	// stdout, when false, sends stdout to /dev/null (completiond's logs):
	// reading it would cost the harness CPU beside the server under test.
	stdout bool
	// parse reads a line of stdout or stderr and sets addr or debug.
	parse func(p *proc, line string)
	// isReady says the process is ready, given what parse set.
	isReady func(p *proc) bool
}

// startProc starts a process and waits until it is ready, it exits, or
// startTimeout passes.
func startProc(ctx context.Context, s procSpec) (*proc, error) {
	p := &proc{name: s.name, exited: make(chan struct{}), ready: make(chan struct{}), parse: s.parse, isReady: s.isReady}
	p.cmd = exec.CommandContext(ctx, s.argv[0], s.argv[1:]...)
	p.cmd.Env = s.env
	p.cmd.WaitDelay = stopTimeout
	setDeathSignal(p.cmd)
	pipes, err := p.pipes(s.stdout)
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	p.pid = p.cmd.Process.Pid
	// Wait closes the pipes: it must come after their last read, so that
	// the output of a process that failed is all there to report.
	var readers sync.WaitGroup
	for _, r := range pipes {
		readers.Go(func() { p.read(r) })
	}
	go func() {
		readers.Wait()
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return p, p.awaitReady(ctx)
}

// pipes connects stderr, and stdout when wanted, to the harness.
func (p *proc) pipes(stdout bool) ([]io.Reader, error) {
	errPipe, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if !stdout {
		return []io.Reader{errPipe}, nil
	}
	outPipe, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	return []io.Reader{outPipe, errPipe}, nil
}

func (p *proc) awaitReady(ctx context.Context) error {
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case <-p.ready:
		return nil
	case <-p.exited:
		return fmt.Errorf("%s exited before it was ready: %v%s", p.name, p.waitErr, p.outputTail())
	case <-t.C:
		p.stop()
		return fmt.Errorf("%s not ready after %v%s", p.name, startTimeout, p.outputTail())
	case <-ctx.Done():
		p.stop()
		return ctx.Err()
	}
}

// read passes each line to parse and keeps the last lines.
func (p *proc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.line(sc.Text())
	}
	_, _ = io.Copy(io.Discard, r)
}

func (p *proc) line(l string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = append(p.lines, l)
	if len(p.lines) > maxOutputLines {
		p.lines = slices.Delete(p.lines, 0, len(p.lines)-maxOutputLines)
	}
	select {
	case <-p.ready:
		return
	default:
	}
	p.parse(p, l)
	if p.isReady(p) {
		close(p.ready)
	}
}

// outputTail is the last lines the process wrote, for an error message.
func (p *proc) outputTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lines) == 0 {
		return ""
	}
	return "\n" + p.name + " said:\n  " + strings.Join(p.lines, "\n  ")
}

// alive is an error if the process exited.
func (p *proc) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited: %v%s", p.name, p.waitErr, p.outputTail())
	default:
		return nil
	}
}

// stop ends the process: SIGTERM, then SIGKILL after stopTimeout.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// parseDebug reads debugserver's ready line.
func parseDebug(p *proc, line string) {
	if a, ok := strings.CutPrefix(line, debugserver.ReadyPrefix); ok {
		p.debug = a
	}
}

// childEnv is the harness's environment without what would change how a
// server under test behaves (its flags, keys, telemetry), plus extra.
func childEnv(extra ...string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		for _, p := range []string{"COMPLETIOND_", "OTEL_", "OPENAI_", "ANTHROPIC_", debugserver.EnvAddr + "="} {
			if strings.HasPrefix(kv, p) {
				return true
			}
		}
		return false
	})
	return append(env, extra...)
}

// freeAddr is a loopback address free now, for a server that cannot say
// which port it picked without logging every request to the harness.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// errAddrInUse reports whether a server failed on its address, which
// another process took between freeAddr and its start (completiond says
// "address already in use", redis-server "Address already in use").
func errAddrInUse(err error) bool {
	return err != nil && (errors.Is(err, syscall.EADDRINUSE) || strings.Contains(strings.ToLower(err.Error()), "address already in use"))
}
