package service

import (
	"context"
	"errors"
	"net"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// serveLoopback serves g, with its connection limits, on a loopback port
// and returns a connection to it.
func serveLoopback(t *testing.T, g *GRPC) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Server.Stop() })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// allocated is the bytes the process has allocated on the heap so far.
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestUnauthenticatedBodiesAreNotRead: with auth on, 16 concurrent
// Complete calls of 8 MiB each without a key end UNAUTHENTICATED having
// cost the process less than an eighth of what they sent: the door refuses
// them on their headers. Before it, gRPC read and decoded every body (the
// 128 MiB, and as much again decoded) before the auth interceptor ran.
// Bytes allocated are measured rather than RSS: they count what was
// spent, whenever the collector runs and whatever else the machine does.
func TestUnauthenticatedBodiesAreNotRead(t *testing.T) {
	const calls, size = 16, 8 << 20
	e := newTestEnv(t, func(c *Config) { c.Auth = testKeys() })
	conn := serveLoopback(t, e.grpc)
	body, err := proto.Marshal(prompt(strings.Repeat("x", size), nil))
	if err != nil {
		t.Fatal(err)
	}
	send := func(ctx context.Context) error {
		return conn.Invoke(ctx, "/completion.v1.Completion/Complete", body, new(completionv1.CompleteResponse), grpc.ForceCodecV2(rawCodec{}))
	}
	if err := send(t.Context()); status.Code(err) != codes.Unauthenticated { // the connection, warm
		t.Fatalf("a call without a key: %v", err)
	}
	runtime.GC()
	before, rss0 := allocated(), vmRSS(t)
	var wg sync.WaitGroup
	errs := make([]error, calls)
	for i := range calls {
		wg.Go(func() { errs[i] = send(t.Context()) })
	}
	wg.Wait()
	spent, rss1 := allocated()-before, vmRSS(t)
	for i, err := range errs {
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("call %d: %v, want UNAUTHENTICATED", i, err)
		}
	}
	t.Logf("%d unauthenticated calls of %d MiB: %d KiB allocated; VmRSS %d → %d KiB", calls, size>>20, spent>>10, rss0>>10, rss1>>10)
	if bound := uint64(calls * size / 8); spent > bound {
		t.Errorf("%d unauthenticated calls of %d MiB allocated %d KiB, want less than %d KiB", calls, size>>20, spent>>10, bound>>10)
	}
}

// TestDoorAuthenticatesOnTheHeaders: the door's verdicts, over every kind
// of call: a valid key passes, no key, a wrong key and two authorization
// headers (a proxy's and the caller's) are UNAUTHENTICATED; health needs
// no key; reflection needs one, as before.
func TestDoorAuthenticatesOnTheHeaders(t *testing.T) {
	e, conn := authEnv(t)
	ctx := t.Context()
	two := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer ops-secret-key", "authorization", "Bearer narrow-secret-key")
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"key", bearer(ctx, "Bearer ops-secret-key"), codes.OK},
		{"no key", ctx, codes.Unauthenticated},
		{"wrong key", bearer(ctx, "Bearer nope"), codes.Unauthenticated},
		{"two authorization headers", two, codes.Unauthenticated},
		{"the same key twice", metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer ops-secret-key", "authorization", "Bearer ops-secret-key"), codes.Unauthenticated},
	} {
		_, err := e.client.Complete(tc.ctx, prompt("hi", nil))
		if status.Code(err) != tc.want {
			t.Errorf("Complete, %s: %v, want %v", tc.name, err, tc.want)
		}
		s, err := e.client.Stream(tc.ctx, prompt("hi", nil))
		if err == nil {
			_, st := recvAll(s.Recv)
			err = st.Err()
		}
		if status.Code(err) != tc.want {
			t.Errorf("Stream, %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health without a key: %v", err)
	}
	if code := reflectionCode(t, conn, ctx); code != codes.Unauthenticated {
		t.Errorf("reflection without a key: %v, want UNAUTHENTICATED", code)
	}
	if code := reflectionCode(t, conn, bearer(ctx, "Bearer ops-secret-key")); code != codes.OK {
		t.Errorf("reflection with a key: %v, want OK", code)
	}
}

// reflectionCode lists the services by reflection and returns the code.
func reflectionCode(t *testing.T, conn *grpc.ClientConn, ctx context.Context) codes.Code {
	t.Helper()
	s, err := reflectionv1.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return status.Code(err)
	}
	req := &reflectionv1.ServerReflectionRequest{MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{ListServices: "*"}}
	_ = s.Send(req) // io.EOF when the server ended the stream already: Recv says how
	_, err = s.Recv()
	return status.Code(err)
}

// TestHealthIsBounded: health needs no key, so what it may hold is
// capped: past --max-health-watches a Watch is refused on its headers
// (RESOURCE_EXHAUSTED, HEALTH_BUSY), a slot comes back when a Watch ends,
// Check goes on meanwhile, and a service name too long is refused.
func TestHealthIsBounded(t *testing.T) {
	_, conn := authEnv(t, func(c *Config) { c.Limits.MaxHealthWatches = 2 })
	h := healthpb.NewHealthClient(conn)
	watch := func(ctx context.Context) error {
		w, err := h.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = w.Recv()
		return err
	}
	var cancels []context.CancelFunc
	for i := range 2 {
		ctx, cancel := context.WithCancel(t.Context())
		cancels = append(cancels, cancel)
		if err := watch(ctx); err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	err := watch(t.Context())
	if info := errorInfo(status.Convert(err)); status.Code(err) != codes.ResourceExhausted || info.GetReason() != reasonHealthBusy || retryDelay(err) <= 0 {
		t.Errorf("a third watch: %v, want RESOURCE_EXHAUSTED with HEALTH_BUSY and RetryInfo", err)
	}
	if _, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("check while the watches are at their cap: %v", err)
	}
	cancels[0]()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for { // the server learns of the cancellation when it reads the reset
		err := watch(ctx)
		if err == nil {
			break
		}
		if info := errorInfo(status.Convert(err)); info.GetReason() != reasonHealthBusy {
			t.Fatalf("a watch once one ended: %v", err)
		}
	}
	_, err = h.Check(t.Context(), &healthpb.HealthCheckRequest{Service: strings.Repeat("s", maxHealthService+1)})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("a service name of %d bytes: %v, want INVALID_ARGUMENT", maxHealthService+1, err)
	}
}

// pipeListener is a listener whose connections a test hands in.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

// TestListenerCapsHandshakesAndConnections: with room for one handshake
// and two connections, Accept waits for a handshake to end (gRPC clears
// the connection's deadline) and for a connection to close; Close ends a
// waiting Accept.
func TestListenerCapsHandshakesAndConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pl := newPipeListener()
		lis := Listener(pl, config.Limits{MaxConnections: 2, MaxHandshakes: 1})
		accepted := make(chan net.Conn, 4)
		go func() {
			for {
				c, err := lis.Accept()
				if err != nil {
					close(accepted)
					return
				}
				accepted <- c
			}
		}()
		offer := func() net.Conn {
			server, client := net.Pipe()
			go func() {
				select {
				case pl.conns <- server:
				case <-pl.closed:
				}
			}()
			return client
		}
		expect := func(what string, want int) []net.Conn {
			t.Helper()
			synctest.Wait()
			var got []net.Conn
			for len(accepted) > 0 {
				got = append(got, <-accepted)
			}
			if len(got) != want {
				t.Fatalf("%s: %d accepted, want %d", what, len(got), want)
			}
			return got
		}
		for range 3 {
			defer offer().Close()
		}
		first := expect("one handshake at a time", 1)[0]
		_ = first.SetDeadline(time.Time{}) // the handshake is over
		second := expect("the next handshake", 1)[0]
		_ = second.SetDeadline(time.Time{})
		expect("two connections held", 0)
		_ = first.Close()
		expect("a connection closed", 1)
		_ = lis.Close()
		synctest.Wait()
		if _, ok := <-accepted; ok {
			t.Error("Accept returned a connection after Close")
		}
	})
}

// TestHandshakeSlotComesBackOnClose: a connection closed in its handshake
// gives its slot back, once.
func TestHandshakeSlotComesBackOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pl := newPipeListener()
		lis := Listener(pl, config.Limits{MaxHandshakes: 1})
		for i := range 3 {
			server, client := net.Pipe()
			defer client.Close()
			go func() { pl.conns <- server }()
			c, err := lis.Accept()
			if err != nil {
				t.Fatalf("accept %d: %v", i, err)
			}
			_ = c.Close()
			_ = c.Close()
		}
		_ = lis.Close()
		if _, err := lis.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v", err)
		}
	})
}
