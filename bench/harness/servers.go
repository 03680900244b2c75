package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/completiond/completiond/bench/debugserver"
	"github.com/completiond/completiond/bench/mock"
	"github.com/completiond/completiond/bench/relay"
)

// warmTimeout bounds the wait for a new server's first answer.
const warmTimeout = 15 * time.Second

// warmRoute is the route of completiond's config that answers one token
// whatever the phase: a server answers it once before it is measured, so
// that what it does once per process (lazy setup, first connection) is
// not counted.
const warmRoute = "warmup"

// server is a relay or completiond process, or a fleet of completiond
// replicas and their redis-server, and the harness's client of it.
type server struct {
	*proc          // the server, or a fleet's first replica
	more   []*proc // a fleet's other replicas
	redis  *proc   // a fleet's redis-server
	client *grpcCaller
}

// procs are the server's processes whose CPU counts as the server's: the
// server, or a fleet's replicas (not its Redis, counted apart).
func (s *server) procs() []*proc {
	if s.proc == nil {
		return nil
	}
	return append([]*proc{s.proc}, s.more...)
}

// add adds a replica.
func (s *server) add(p *proc) {
	if s.proc == nil {
		s.proc = p
		return
	}
	s.more = append(s.more, p)
}

func (s *server) stop() {
	if s.client != nil {
		s.client.close()
	}
	for _, p := range s.procs() {
		p.stop()
	}
	if s.redis != nil {
		s.redis.stop()
	}
}

// alive is an error if a process of the server exited.
func (s *server) alive() error {
	for _, p := range append(s.procs(), s.redis) {
		if p == nil {
			continue
		}
		if err := p.alive(); err != nil {
			return err
		}
	}
	return nil
}

// startMock starts the mock upstream from the harness's own binary.
func (r *runner) startMock(ctx context.Context) (*proc, error) {
	return startProc(ctx, procSpec{
		name: "mock", argv: slices.Concat(r.cfg.Self, []string{RoleArg, "mock"}), env: childEnv(), stdout: true,
		parse: func(p *proc, line string) {
			if u, ok := strings.CutPrefix(line, mock.ReadyPrefix); ok {
				p.addr = u
			}
		},
		isReady: func(p *proc) bool { return p.addr != "" },
	})
}

func (r *runner) mockURL() string { return r.mock.addr }

// mockStats reads the mock's counters.
func mockStats(ctx context.Context, url string) (mock.Stats, error) {
	var st mock.Stats
	body, err := get(ctx, url+"/stats")
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(body, &st)
}

// get is the body of a GET of url, which must answer 200.
func get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, err
}

// startServer starts t for model (the phase's spec) and answers one
// request through it, with a client for streams over channels of
// perChannel streams (0: one channel). completiond, which
// is given a port that was free a moment before, is started again if
// another process took it meanwhile.
func (r *runner) startServer(ctx context.Context, t target, model string, streams, perChannel int) (*server, error) {
	for try := 1; ; try++ {
		s, err := r.tryServer(ctx, t, model, streams, perChannel)
		if err == nil || !errAddrInUse(err) || try == 3 {
			return s, err
		}
	}
}

func (r *runner) tryServer(ctx context.Context, t target, model string, streams, perChannel int) (*server, error) {
	if t == fleetOf || t == unshared {
		return r.tryFleet(ctx, model, t == fleetOf)
	}
	var (
		p     *proc
		err   error
		route string
	)
	switch t {
	case bareRelay:
		p, err = r.startRelay(ctx, model)
		route = mock.Spec{Tokens: 1}.Model() // the relay's route is the upstream model
	case completiond, spreadOut:
		p, err = r.startCompletiond(ctx, model, "")
		route = warmRoute
	default:
		return nil, fmt.Errorf("no server for %s", t)
	}
	if err != nil {
		return nil, err
	}
	s := &server{proc: p}
	if s.client, err = dialServer(p.addr, streams, perChannel, r.request()); err == nil {
		err = s.ready(ctx, route)
	}
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// ready waits until each of the server's processes listens, then has
// each answer one request on route (warm).
func (s *server) ready(ctx context.Context, route string) error {
	for _, p := range s.procs() {
		if err := p.listening(ctx); err != nil {
			return err
		}
	}
	return s.warm(ctx, route)
}

// listening waits until the process accepts connections (completiond
// says its debug address before it listens): a gRPC client that found
// nobody there would back off for a second before it tried again.
func (p *proc) listening(ctx context.Context) error {
	deadline := time.Now().Add(warmTimeout)
	for {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", p.addr)
		if err == nil {
			return conn.Close()
		}
		if err := p.alive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not listen on %s after %v: %w", p.name, p.addr, warmTimeout, err)
		}
		if !sleep(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// warm answers one request through each process (a fleet's replica i
// on its channel i; one server on its first channel), retrying while the
// server gets ready.
func (s *server) warm(ctx context.Context, route string) error {
	c := s.client.withRoute(route)
	deadline := time.Now().Add(warmTimeout)
	for i, p := range s.procs() {
		for {
			res := c.call(ctx, i)
			if res.err == nil {
				break
			}
			if err := s.alive(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not answer within %v: %w%s", p.name, warmTimeout, res.err, p.outputTail())
			}
			if !sleep(ctx, 50*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	return nil
}

func (r *runner) startRelay(ctx context.Context, model string) (*proc, error) {
	return startProc(ctx, procSpec{
		name: "relay",
		argv: slices.Concat(r.cfg.Self, []string{RoleArg, "relay", "-upstream", r.mockURL() + "/v1", "-model", model}),
		env:  childEnv(debugserver.EnvAddr + "=127.0.0.1:0"), stdout: true,
		parse: func(p *proc, line string) {
			parseDebug(p, line)
			if a, ok := strings.CutPrefix(line, relay.ReadyPrefix); ok {
				p.addr = a
			}
		},
		isReady: func(p *proc) bool { return p.addr != "" && p.debug != "" },
	})
}

// startCompletiond starts completiond with one route to the mock for
// model, and the warm-up route, with redisURL as its Redis unless it is
// empty, and otherwise its shipped defaults: the limits a caller meets are
// part of what is measured. Its stdout (the JSON log) goes to /dev/null,
// so it cannot say its port: it gets one that is free now.
func (r *runner) startCompletiond(ctx context.Context, model, redisURL string) (*proc, error) {
	r.servers++
	cfgPath := filepath.Join(r.dir, "completiond-"+strconv.Itoa(r.servers)+".yaml")
	if err := os.WriteFile(cfgPath, []byte(completiondConfig(r.mockURL()+"/v1", model, redisURL, r.cfg.Fleet.CommitDelay)), 0o644); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	metrics, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p, err := startProc(ctx, procSpec{
		name: "completiond",
		argv: []string{r.completiond, "--addr", addr, "--config", cfgPath, "--log-level", r.cfg.LogLevel,
			"--drain-timeout", "1s", "--shutdown-grace", "1s", "--metrics-addr", metrics},
		env:     childEnv(debugserver.EnvAddr + "=127.0.0.1:0"),
		parse:   parseDebug,
		isReady: func(p *proc) bool { return p.debug != "" },
	})
	if err != nil {
		return nil, err
	}
	p.addr, p.metrics = addr, metrics
	return p, nil
}

// completiondConfig routes "bench" (the default) to model at upstream, and
// warmRoute to a one-token answer, with redisURL as the fleet's Redis
// (redis.url) unless it is empty, with commitDelay as its
// redis.commit_delay unless it is 0. The timeouts are long: a held stream
// must stay open, and a paced one may wait long between tokens.
func completiondConfig(upstream, model, redisURL string, commitDelay time.Duration) string {
	route := func(name, model string) string {
		return fmt.Sprintf("  %s:\n    provider: mock\n    model: %q\n    context_window: 128000\n    max_output_tokens: 4096\n"+
			"    timeouts: {headers: 1m, first_token: 1h, idle: 1h, total: 1h}\n", name, model)
	}
	redis := ""
	if redisURL != "" {
		redis = fmt.Sprintf("redis:\n  url: %q\n", redisURL)
		if commitDelay != 0 {
			redis += fmt.Sprintf("  commit_delay: %s\n", commitDelay)
		}
	}
	return "default_route: bench\nproviders:\n  mock:\n    kind: openai\n" +
		fmt.Sprintf("    base_url: %q\n    api_key: sk-loadbench\n", upstream) +
		"routes:\n" + route("bench", model) + route(warmRoute, mock.Spec{Tokens: 1}.Model()) + redis
}

// memReading is what a server holds at one moment.
type memReading struct {
	rss, goroutines int64
	debugserver.Mem
}

// mem reads the process's debugserver.Mem.
func (p *proc) mem(ctx context.Context) (debugserver.Mem, error) {
	var m debugserver.Mem
	body, err := get(ctx, "http://"+p.debug+debugserver.MemPath)
	if err != nil {
		return m, err
	}
	err = json.Unmarshal(body, &m)
	return m, err
}

// memory reads the server's RSS, goroutines, heap and stacks.
func (s *server) memory(ctx context.Context) (memReading, error) {
	var m memReading
	var err error
	if m.rss, err = rss(s.pid); err != nil {
		return m, err
	}
	body, err := get(ctx, "http://"+s.debug+debugserver.GoroutinesPath)
	if err != nil {
		return m, err
	}
	if m.goroutines, err = strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64); err != nil {
		return m, err
	}
	m.Mem, err = s.mem(ctx)
	return m, err
}

// perStream is what each of n streams added between m0 and m, into meas.
func (m memReading) perStream(m0 memReading, n int, meas *measurement) {
	per := func(a, b int64) float64 { return float64(a-b) / float64(n) }
	meas.rssPerStream = per(m.rss, m0.rss)
	meas.goroutinesPerStream = per(m.goroutines, m0.goroutines)
	meas.heapPerStream = per(int64(m.HeapInuse), int64(m0.HeapInuse))
	meas.stackPerStream = per(int64(m.StackInuse), int64(m0.StackInuse))
}
