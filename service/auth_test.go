package service

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/completiond/completiond/config"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/telemetry"
	"github.com/completiond/completiond/internal/testkit"
)

// testKeys are the keys of the auth tests: one for every route, one for
// the sim route only, one for sim and sim-large.
func testKeys() config.Auth {
	return config.Auth{Keys: []config.APIKey{
		{Name: "ops", SHA256: config.HashKey("ops-secret-key")},
		{Name: "narrow", SHA256: config.HashKey("narrow-secret-key"), Routes: []string{"sim"}},
		{Name: "large", SHA256: config.HashKey("large-secret-key"), Routes: []string{"sim-large"}},
	}}
}

// authEnv is a test server that requires the test keys, and its connection.
func authEnv(t *testing.T, mutate ...func(*Config)) (*testEnv, *grpc.ClientConn) {
	t.Helper()
	var conn *grpc.ClientConn
	e := newTestEnv(t, append([]func(*Config){func(c *Config) { c.Auth = testKeys() }}, mutate...)...)
	conn = serveBufconn(t, e.grpc)
	t.Cleanup(func() { conn.Close() })
	e.client = completionv1.NewCompletionClient(conn)
	return e, conn
}

// bearer is ctx sending authorization: value.
func bearer(ctx context.Context, value string) context.Context {
	if value == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", value)
}

func TestAuthRefusesBeforeAnyUpstreamCall(t *testing.T) {
	for _, tc := range []struct {
		name      string
		auth      string
		route     string
		fallbacks []string
		want      codes.Code
	}{
		{"good key", "Bearer ops-secret-key", "", nil, codes.OK},
		{"scheme is case-insensitive", "bearer ops-secret-key", "", nil, codes.OK},
		{"key allowed the route", "Bearer narrow-secret-key", "sim", nil, codes.OK},
		{"missing key", "", "", nil, codes.Unauthenticated},
		{"bad key", "Bearer not-a-key", "", nil, codes.Unauthenticated},
		{"key of another scheme", "Basic ops-secret-key", "", nil, codes.Unauthenticated},
		{"no scheme", "ops-secret-key", "", nil, codes.Unauthenticated},
		{"default route not allowed", "Bearer large-secret-key", "", nil, codes.PermissionDenied},
		{"route not allowed", "Bearer narrow-secret-key", "sim-large", nil, codes.PermissionDenied},
		{"named fallback not allowed", "Bearer narrow-secret-key", "sim", []string{"sim-large"}, codes.PermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := authEnv(t)
			req := prompt("hi", nil)
			req.Route, req.FallbackRoutes = tc.route, tc.fallbacks
			ctx := bearer(t.Context(), tc.auth)
			for _, rpc := range []struct {
				name string
				call func() error
			}{
				{"Stream", func() error {
					st, err := e.client.Stream(ctx, req)
					if err != nil {
						return err
					}
					for {
						if _, err := st.Recv(); err != nil {
							if errors.Is(err, io.EOF) {
								return nil
							}
							return err
						}
					}
				}},
				{"Complete", func() error { _, err := e.client.Complete(ctx, req); return err }},
				{"Session", func() error { return runSessionStart(ctx, e.client, req) }},
			} {
				before := e.upstream.calls.Load()
				err := rpc.call()
				if got := status.Code(err); got != tc.want {
					t.Fatalf("%s: %v, want %v", rpc.name, err, tc.want)
				}
				if tc.want != codes.OK {
					if n := e.upstream.calls.Load() - before; n != 0 {
						t.Errorf("%s: %d upstream calls for a refused request", rpc.name, n)
					}
					if strings.Contains(status.Convert(err).Message(), "secret") {
						t.Errorf("%s: the status %q quotes the key", rpc.name, status.Convert(err).Message())
					}
				}
			}
		})
	}
}

// runSessionStart runs a Session that starts with req and returns its status.
func runSessionStart(ctx context.Context, client completionv1.CompletionClient, req *completionv1.CompleteRequest) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, err := client.Session(ctx)
	if err != nil {
		return err
	}
	// A refused call may end before Send: its status comes with Recv.
	_ = st.Send(&completionv1.SessionRequest{Request: &completionv1.SessionRequest_Start{Start: &completionv1.SessionStart{Request: req}}})
	_ = st.CloseSend()
	_, err = testkit.Drain(st)
	return err
}

func TestHealthStaysOpenWithoutAKey(t *testing.T) {
	_, conn := authEnv(t)
	h, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v %v", h, err)
	}
}

func TestFallbacksAKeyMayNotUseAreDropped(t *testing.T) {
	e, _ := authEnv(t)
	// not_found falls back to sim-fallback, which the narrow key may not use.
	evs, st := e.streamAllCtx(t, bearer(t.Context(), "Bearer narrow-secret-key"), faults("not_found"))
	if st.Code() == codes.OK {
		t.Fatalf("status OK, want the completion to end without its fallback")
	}
	for _, ev := range evs {
		if to := ev.GetTransition().GetToModel(); to != "" && to != "sim-1" {
			t.Errorf("transition to model %q: the chain kept a route the key may not use", to)
		}
	}
	if n := e.upstream.calls.Load(); n != 1 {
		t.Errorf("%d upstream calls, want 1", n)
	}
	// The ops key may use every route: the same script falls back.
	evs, st = e.streamAllCtx(t, bearer(t.Context(), "Bearer ops-secret-key"), faults("not_found"))
	if st.Code() != codes.OK {
		t.Fatalf("ops: %v", st)
	}
	if !slices.ContainsFunc(evs, func(ev *completionv1.CompletionEvent) bool {
		return ev.GetTransition().GetReason() == completionv1.TransitionReason_TRANSITION_REASON_MODEL_FALLBACK
	}) {
		t.Error("ops: no MODEL_FALLBACK")
	}
}

func TestPermissionDeniedNamesRouteAndKey(t *testing.T) {
	e, _ := authEnv(t)
	req := prompt("hi", nil)
	req.Route = "sim-large"
	_, err := e.client.Complete(bearer(t.Context(), "Bearer narrow-secret-key"), req)
	st := status.Convert(err)
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if st.Code() != codes.PermissionDenied || info.GetReason() != "ROUTE_NOT_PERMITTED" ||
		info.GetMetadata()["route"] != "sim-large" || info.GetMetadata()["key"] != "narrow" {
		t.Errorf("status %v, ErrorInfo %v", st, info)
	}
}

// TestUnknownRouteListsOnlyTheKeysRoutes: an unknown route's violation
// lists the routes the caller's key may use, not every route the server
// has; a key allowed every route sees them all; over Session too.
func TestUnknownRouteListsOnlyTheKeysRoutes(t *testing.T) {
	e, _ := authEnv(t)
	req := prompt("hi", nil)
	req.Route = "gpt-17"
	for _, tc := range []struct {
		key       string
		want, not []string
	}{
		{"narrow", []string{"may use: sim)"}, []string{"sim-large", "sim-fallback"}},
		{"ops", []string{"sim", "sim-large", "sim-fallback"}, nil},
	} {
		ctx := bearer(t.Context(), "Bearer "+tc.key+"-secret-key")
		_, err := e.client.Complete(ctx, req)
		sessionErr := runSessionStart(ctx, e.client, req)
		for rpc, err := range map[string]error{"Complete": err, "Session": sessionErr} {
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("%s, key %s, unknown route: %v", rpc, tc.key, st)
			}
			text := st.Message()
			for _, d := range st.Details() {
				if br, ok := d.(*errdetails.BadRequest); ok {
					for _, v := range br.GetFieldViolations() {
						text += " " + v.GetDescription()
					}
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("%s, key %s: %q does not list %s", rpc, tc.key, text, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(text, n) {
					t.Errorf("%s, key %s: %q lists %s, which the key may not use", rpc, tc.key, text, n)
				}
			}
		}
	}
}

// TestKeyNameInLogsAndSpans: the key's name, never the key, is on the RPC's
// log line, which reports the completion too, and on the completion span.
func TestKeyNameInLogsAndSpans(t *testing.T) {
	var logs testkit.SyncBuffer
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s := tracedEnv(t, telemetry.Telemetry{TracerProvider: tp}, func(c *Config) {
		c.Auth = testKeys()
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	streamEvents(bearer(t.Context(), "Bearer ops-secret-key"), t, s.client, prompt("hi", nil))
	_, err := s.client.Complete(t.Context(), prompt("hi", nil))
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no key: %v", err)
	}
	s.drain()
	out := logs.String()
	if strings.Contains(out, "secret") {
		t.Errorf("the key is in the logs:\n%s", out)
	}
	var rpcLine bool
	for line := range strings.SplitSeq(out, "\n") {
		rpcLine = rpcLine || strings.Contains(line, `"grpc.method":"Stream"`) && strings.Contains(line, `"auth.key":"ops"`) &&
			strings.Contains(line, `"completion_id":"cmpl_`)
	}
	if !rpcLine || strings.Contains(out, "completion finished") || strings.Contains(out, "auth_key") {
		t.Errorf("want the Stream's line with auth.key and completion_id, and no completion line of its own:\n%s", out)
	}
	var found bool
	for _, sp := range spans.Ended() {
		if strings.HasPrefix(sp.Name(), "chat ") {
			found = slices.Contains(sp.Attributes(), attribute.String("completiond.auth.key", "ops"))
		}
	}
	if !found {
		t.Error("the completion span lacks completiond.auth.key=ops")
	}
}

func TestAuthConfigIsChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		auth config.Auth
		want string
	}{
		{"no name", config.Auth{Keys: []config.APIKey{{SHA256: config.HashKey("k")}}}, "name is required"},
		{"twice", config.Auth{Keys: []config.APIKey{{Name: "a", SHA256: config.HashKey("k")}, {Name: "a", SHA256: config.HashKey("l")}}}, "declared twice"},
		{"same key", config.Auth{Keys: []config.APIKey{{Name: "a", SHA256: config.HashKey("k")}, {Name: "b", SHA256: config.HashKey("k")}}}, "same key"},
		{"unknown route", config.Auth{Keys: []config.APIKey{{Name: "a", SHA256: config.HashKey("k"), Routes: []string{"nope"}}}}, `unknown route "nope"`},
		{"empty routes", config.Auth{Keys: []config.APIKey{{Name: "a", SHA256: config.HashKey("k"), Routes: []string{}}}}, "allows nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Auth = tc.auth
			if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want %q", err, tc.want)
			}
		})
	}
}
