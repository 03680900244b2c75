package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// redisTimeout bounds each of the harness's own exchanges with Redis.
const redisTimeout = 5 * time.Second

// startRedis starts a fresh redis-server on a free loopback port, as
// internal/redistest does for the tests: no persistence, its directory a
// new one of the run's. The address is free a moment before: startServer
// starts the fleet again if another process took it.
func (r *runner) startRedis(ctx context.Context) (*proc, error) {
	dir, err := os.MkdirTemp(r.dir, "redis-")
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	return startProc(ctx, procSpec{
		name: "redis-server",
		argv: []string{r.cfg.Fleet.RedisServer, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "notice"},
		env: childEnv(), stdout: true,
		parse: func(p *proc, line string) {
			if strings.Contains(line, "Ready to accept connections") {
				p.addr = addr
			}
		},
		isReady: func(p *proc) bool { return p.addr != "" },
	})
}

// redisVersion is what redis-server --version says, for the report.
func redisVersion(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w (install Debian's redis-server: make redis-installed)", bin, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// redisConn is a connection for the harness's own commands, in Redis's
// inline protocol: no HELLO or CLIENT SETINFO that a client library
// would add to the counts.
type redisConn struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialRedis(ctx context.Context, addr string) (*redisConn, error) {
	conn, err := (&net.Dialer{Timeout: redisTimeout}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &redisConn{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}, nil
}

func (c *redisConn) close() { _ = c.conn.Close() }

// do sends the inline command cmd and reads its reply: a simple or bulk
// string, or an integer as text; an error reply is an error.
func (c *redisConn) do(cmd string) (string, error) {
	_ = c.conn.SetDeadline(time.Now().Add(redisTimeout))
	if _, err := c.conn.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	line, err := c.line()
	if err != nil || line == "" {
		return "", fmt.Errorf("redis %s: %v", cmd, err)
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("redis %s: reply %q", cmd, line)
		}
		b := make([]byte, n+2)
		_, err = io.ReadFull(c.r, b)
		return string(b[:n]), err
	}
	return "", fmt.Errorf("redis %s: %s", cmd, line)
}

// line reads one line of the protocol, without its CRLF.
func (c *redisConn) line() (string, error) {
	l, err := c.r.ReadString('\n')
	return strings.TrimSuffix(l, "\r\n"), err
}

// redisStats is what a redis-server counted: its CPU time (INFO cpu:
// used_cpu_sys and used_cpu_user, all its threads) and the calls of each
// command (INFO commandstats: those its clients sent and those its
// scripts ran alike, TestRedisCountsScriptCalls), by commandstats name
// (evalsha, xadd, client|setinfo), the harness's own INFO and MONITOR
// left out.
type redisStats struct {
	cpu   time.Duration
	calls map[string]int64
}

// harnessCommands are the commands the harness itself sends to Redis.
var harnessCommands = map[string]bool{"info": true, "monitor": true}

// readRedisStats reads Redis's counters at addr.
func readRedisStats(ctx context.Context, addr string) (redisStats, error) {
	c, err := dialRedis(ctx, addr)
	if err != nil {
		return redisStats{}, err
	}
	defer c.close()
	cmds, err := c.do("INFO commandstats")
	if err != nil {
		return redisStats{}, err
	}
	cpu, err := c.do("INFO cpu")
	if err != nil {
		return redisStats{}, err
	}
	return parseRedisStats(cmds, cpu)
}

// parseRedisStats reads the text of INFO commandstats and INFO cpu.
func parseRedisStats(commandstats, cpu string) (redisStats, error) {
	st := redisStats{calls: map[string]int64{}}
	for line := range strings.Lines(commandstats) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		calls, _, _ := strings.Cut(strings.TrimPrefix(fields, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return st, fmt.Errorf("INFO commandstats: %q", line)
		}
		if !harnessCommands[name] {
			st.calls[name] = n
		}
	}
	for line := range strings.Lines(cpu) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			s, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return st, fmt.Errorf("INFO cpu: %q", line)
			}
			st.cpu += time.Duration(s * float64(time.Second))
		}
	}
	return st, nil
}

// sub is what Redis counted between s0 and s.
func (s redisStats) sub(s0 redisStats) redisStats {
	d := redisStats{cpu: s.cpu - s0.cpu, calls: map[string]int64{}}
	for name, n := range s.calls {
		if n -= s0.calls[name]; n > 0 {
			d.calls[name] = n
		}
	}
	return d
}

// all is the calls of every command.
func (s redisStats) all() int64 { return sumValues(s.calls) }

// scriptCalls are the commands that run a script: what a client sends,
// never what a script runs.
var scriptCalls = []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}

// ofScripts is the calls of the commands that run scripts.
func (s redisStats) ofScripts() int64 {
	var n int64
	for _, c := range scriptCalls {
		n += s.calls[c]
	}
	return n
}

// inScripts is the calls that scripts ran, by share (scriptShares; a
// command without a share counts as sent), or false without shares.
func (s redisStats) inScripts(share map[string]float64) (float64, bool) {
	if share == nil {
		return 0, false
	}
	var n float64
	for name, c := range s.calls {
		n += float64(c) * share[name]
	}
	return n, true
}
