package service

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/fleet"
	"github.com/completiond/completiond/provider/sim"
	"github.com/completiond/completiond/recovery"
)

// maxTestStatus is what the tests allow a status to weigh, encoded.
const maxTestStatus = 8 << 10

// TestSmallBadRequestsDoNotKillTheirConnection runs five healthy streams on
// one client connection, then sends on the same connection requests whose
// refusal used to weigh more than the client's header list limit (16 MiB),
// so that the client tore the connection down with every stream on it: 200
// 000 empty content blocks (one violation each) and a 7 MB route name
// (echoed in the message and the details). Each is refused with a small
// INVALID_ARGUMENT, and the five streams complete.
func TestSmallBadRequestsDoNotKillTheirConnection(t *testing.T) {
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	healthy := prompt("Tell me a long story.", map[string]string{sim.MetaPace: "20ms", sim.MetaWords: "50"})
	const streams = 5
	var wg sync.WaitGroup
	results := make([]error, streams)
	started := make(chan struct{}, streams)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = runHealthy(ctx, env.client, healthy, started)
		}()
	}
	for range streams { // every healthy stream is under way before the bad requests are sent
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the healthy streams did not start")
		}
	}

	empty := make([]*completionv1.ContentBlock, 200_000)
	for i := range empty {
		empty[i] = &completionv1.ContentBlock{}
	}
	blocks := &completionv1.CompleteRequest{Messages: []*completionv1.Message{{Role: completionv1.Role_ROLE_USER, Content: empty}}}
	route := prompt("hello", nil)
	route.Route = strings.Repeat("r", 7<<20)
	for _, bad := range []struct {
		name  string
		req   *completionv1.CompleteRequest
		field string
		check func(t *testing.T, st *status.Status)
	}{
		{"200 000 empty blocks", blocks, "messages[0].content[0]", func(t *testing.T, st *status.Status) {
			v := badRequest(st).GetFieldViolations()
			if len(v) != maxViolations+1 {
				t.Fatalf("%d violations, want %d and one that counts the rest", len(v), maxViolations+1)
			}
			if last := v[len(v)-1]; !strings.Contains(last.GetDescription(), "199980 more") {
				t.Errorf("last violation %v does not count the 199 980 left out", last)
			}
		}},
		{"7 MB route", route, "route", func(t *testing.T, st *status.Status) {
			if !strings.Contains(st.Message(), "(7340032 bytes)") {
				t.Errorf("message %q does not give the route's length", st.Message())
			}
		}},
	} {
		for _, rpc := range []string{"Complete", "Stream"} {
			var err error
			if rpc == "Complete" {
				_, err = env.client.Complete(ctx, bad.req)
			} else {
				var s interface {
					Recv() (*completionv1.CompletionEvent, error)
				}
				if s, err = env.client.Stream(ctx, bad.req); err == nil {
					_, err = s.Recv()
				}
			}
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !hasViolation(st.Details(), bad.field) {
				t.Fatalf("%s %s: status %v %.200q, want INVALID_ARGUMENT naming %s", rpc, bad.name, st.Code(), st.Message(), bad.field)
			}
			if n := proto.Size(st.Proto()); n >= maxTestStatus {
				t.Errorf("%s %s: status of %d bytes", rpc, bad.name, n)
			}
			bad.check(t, st)
		}
	}

	wg.Wait()
	for i, err := range results {
		if err != nil {
			t.Errorf("healthy stream %d: %v", i, err)
		}
	}
}

// runHealthy runs one Stream to its end, signalling started at its first
// event, and returns an error unless it completed.
func runHealthy(ctx context.Context, client completionv1.CompletionClient, req *completionv1.CompleteRequest, started chan<- struct{}) error {
	s, err := client.Stream(ctx, req)
	if err != nil {
		started <- struct{}{}
		return err
	}
	first := true
	var last *completionv1.CompletionEvent
	for {
		ev, err := s.Recv()
		if first {
			started <- struct{}{}
			first = false
		}
		if errors.Is(err, io.EOF) {
			if r := last.GetResult().GetReason(); r != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED {
				return errors.New("ended " + r.String())
			}
			return nil
		}
		if err != nil {
			return err
		}
		last = ev
	}
}

func badRequest(st *status.Status) *errdetails.BadRequest {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			return br
		}
	}
	return nil
}

// TestEveryStatusIsSmall builds the statuses of refusals and of ends whose
// parts a caller or an upstream controls, at their largest, and checks each
// stays under the bound.
func TestEveryStatusIsSmall(t *testing.T) {
	huge := strings.Repeat("é", 1<<20)
	var many violations
	for range 1000 {
		many.add("messages[0].content[0]", "value %s", quote(huge))
	}
	var wide violations
	for range maxViolations {
		wide = append(wide, &errdetails.BadRequest_FieldViolation{Field: huge, Description: huge})
	}
	failure := &recovery.Failure{Kind: recovery.FailServer, Message: huge, Type: huge, Code: huge, RequestID: huge, Provider: huge}
	tests := []struct {
		name string
		st   *status.Status
		code codes.Code
	}{
		{"many violations", status.Convert(invalidArgument(many)), codes.InvalidArgument},
		{"wide violations", status.Convert(invalidArgument(wide)), codes.InvalidArgument},
		{"session violation", endStatus(ending{result: &recovery.Result{Reason: recovery.AbortedStreaming}, violation: huge}), codes.InvalidArgument},
		{"upstream failure", endStatus(ending{result: &recovery.Result{Reason: recovery.ModelError, Failure: failure, Retryable: true}}), codes.Unavailable},
		{"unknown completion", status.Convert(logStatus(fleet.ErrNotFound, huge, 0)), codes.NotFound},
		{"cancel pending", status.Convert(cancelPendingStatus(huge, time.Hour)), codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if n := proto.Size(tt.st.Proto()); n > maxStatusBytes {
				t.Errorf("status of %d bytes, over %d", n, maxStatusBytes)
			}
			if tt.st.Code() != tt.code {
				t.Errorf("code %v, want %v", tt.st.Code(), tt.code)
			}
			if _, err := proto.Marshal(tt.st.Proto()); err != nil {
				t.Errorf("status does not encode: %v", err)
			}
		})
	}
}

func TestQuoteCutsLongValues(t *testing.T) {
	tests := []struct{ in, want string }{
		{"sim", `"sim"`},
		{strings.Repeat("a", maxEcho), `"` + strings.Repeat("a", maxEcho) + `"`},
		{strings.Repeat("a", maxEcho+1), `"` + strings.Repeat("a", maxEcho) + `"… (65 bytes)`},
		{strings.Repeat("é", 40), `"` + strings.Repeat("é", 32) + `"… (80 bytes)`},
		{"\xff\xfe", `"\xff\xfe"`},
	}
	for _, tt := range tests {
		if got := quote(tt.in); got != tt.want {
			t.Errorf("quote(%.20q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
