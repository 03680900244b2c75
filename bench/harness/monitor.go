package harness

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// monitor counts the commands Redis's scripts run, by name, from its
// MONITOR stream, where each command a script runs is a line of the
// client "lua" ([0 lua]) after the line of the EVALSHA that ran it. It
// counts from the first INFO commandstats another connection sends to the
// next — the harness's two snapshots around a load —, so that its counts
// and the snapshots' deltas cover the same commands: Redis runs one
// command at a time, and MONITOR shows them in that order.
type monitor struct {
	c    *redisConn
	done chan struct{}
	lua  map[string]int64
	err  error
}

// startMonitor starts counting the commands of Redis at addr.
func startMonitor(ctx context.Context, addr string) (*monitor, error) {
	c, err := dialRedis(ctx, addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.do("MONITOR"); err != nil {
		c.close()
		return nil, err
	}
	_ = c.conn.SetDeadline(time.Time{})
	m := &monitor{c: c, done: make(chan struct{}), lua: map[string]int64{}}
	go m.read()
	return m, nil
}

// read counts the lines of scripts between the two snapshots.
func (m *monitor) read() {
	defer close(m.done)
	counting := false
	for {
		line, err := m.c.line()
		if err != nil {
			m.err = err
			return
		}
		who, name, ok := monitorLine(line)
		switch {
		case !ok:
		case who != "lua" && name == "info" && strings.Contains(line, `"commandstats"`):
			if counting {
				return
			}
			counting = true
		case counting && who == "lua":
			m.lua[name]++
		}
	}
}

// monitorLine reads a MONITOR line, +1795650000.716413 [0 lua] "SET" "a"
// "v": the client (lua, or an address) and the command, in lower case.
func monitorLine(line string) (who, name string, ok bool) {
	_, rest, ok := strings.Cut(line, " [")
	if !ok {
		return "", "", false
	}
	inside, rest, ok := strings.Cut(rest, "] \"")
	if !ok {
		return "", "", false
	}
	_, who, _ = strings.Cut(inside, " ")
	name, _, ok = strings.Cut(rest, "\"")
	return who, strings.ToLower(name), ok
}

// wait returns the counts once the second snapshot has passed, and ends
// the monitor.
func (m *monitor) wait() (map[string]int64, error) {
	t := time.NewTimer(redisTimeout)
	defer t.Stop()
	select {
	case <-m.done:
	case <-t.C:
		m.c.close()
		<-m.done
		return nil, fmt.Errorf("redis MONITOR: the harness's second INFO commandstats not seen after %v", redisTimeout)
	}
	m.c.close()
	if m.err != nil {
		return nil, fmt.Errorf("redis MONITOR: %w", m.err)
	}
	return m.lua, nil
}

// close ends the monitor.
func (m *monitor) close() {
	m.c.close()
	<-m.done
}

// scriptShares is, for each command Redis counted (calls), the share of
// its calls that scripts ran (of the monitor's counts, lua): 0 for one
// only clients sent; a command not counted has none.
func scriptShares(calls, lua map[string]int64) map[string]float64 {
	share := map[string]float64{}
	for name, n := range calls {
		share[name] = min(1, float64(lua[name])/float64(n))
	}
	return share
}
