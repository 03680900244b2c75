package classify

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/completiond/completiond/provider"
	"github.com/completiond/completiond/recovery"
)

// silentUpstream accepts calls and sends nothing: each handler tells
// entered, then waits for drop and drops its connection without a byte of
// a response.
func silentUpstream(t *testing.T) (url string, entered <-chan struct{}, drop chan<- struct{}) {
	t.Helper()
	in, out := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		in <- struct{}{}
		<-out
		panic(http.ErrAbortHandler) // net/http closes the connection, writing nothing
	}))
	t.Cleanup(srv.Close)
	return srv.URL, in, out
}

// TestSilenceBeforeADropMarksADeadRoute: a connection failure carries how
// long the upstream had been silent, on the attempt's clock; a drop after
// recovery.DeadRouteSilence or more of it marks the route dead, a quick
// reset or refusal does not. The upstream is a real HTTP server that
// accepts and stays silent; the silence is the attempt's clock moved, not
// waited for.
func TestSilenceBeforeADropMarksADeadRoute(t *testing.T) {
	refused := func(t *testing.T) string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := lis.Addr().String()
		_ = lis.Close()
		return "http://" + addr
	}
	for _, tc := range []struct {
		name    string
		silence time.Duration // how far the attempt's clock moves before the drop
		refuse  bool          // nobody listens: refused at once
		dead    bool
	}{
		{name: "reset at once", silence: 0},
		{name: "refused", refuse: true},
		{name: "dropped after a short silence", silence: recovery.DeadRouteSilence - time.Millisecond},
		{name: "dropped after the dead-route silence", silence: recovery.DeadRouteSilence, dead: true},
		{name: "dropped after 16 s of silence", silence: 16 * time.Second, dead: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Begin(t.Context(), provider.Timeouts{Headers: time.Hour})
			defer a.End()
			start := a.start
			var clock atomic.Int64 // moved by the upstream's goroutine, read by the call's
			a.now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
			var url string
			if tc.refuse {
				url = refused(t)
			} else {
				u, entered, drop := silentUpstream(t)
				url = u
				go func() {
					<-entered
					clock.Store(int64(tc.silence)) // before the drop, which the call sees
					close(drop)
				}()
			}
			req, err := http.NewRequestWithContext(a.Context(), http.MethodPost, url+"/v1/chat/completions", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			res, err := a.Middleware(req, (&http.Client{Transport: tr}).Do)
			if err == nil {
				_ = res.Body.Close()
				t.Fatalf("the silent upstream answered %s", res.Status)
			}
			f, ok := a.Failure(&Classifier{Provider: "openai"}, err).(*recovery.Failure)
			if !ok || f.Kind != recovery.FailConnection {
				t.Fatalf("failure %v, want a connection failure", f)
			}
			if f.Silence != tc.silence || f.DeadRoute() != tc.dead {
				t.Errorf("silence %v, dead route %v; want %v, %v", f.Silence, f.DeadRoute(), tc.silence, tc.dead)
			}
		})
	}
}

// TestHeadersTimeoutIsADeadRoute: silence until the headers timeout is a
// dead route too (the machine falls back at once after any timeout); a
// timeout after the headers is not a dead route, whatever its phase.
func TestHeadersTimeoutIsADeadRoute(t *testing.T) {
	for _, tc := range []struct {
		phase recovery.TimeoutPhase
		dead  bool
	}{
		{recovery.TimeoutHeaders, true},
		{recovery.TimeoutFirstToken, false},
		{recovery.TimeoutIdle, false},
		{recovery.TimeoutTotal, false},
	} {
		f := (&Classifier{Provider: "openai"}).Timeout(tc.phase, time.Second, 0, nil)
		if got := f.DeadRoute(); got != tc.dead {
			t.Errorf("timeout %v: dead route %v, want %v", tc.phase, got, tc.dead)
		}
	}
}
