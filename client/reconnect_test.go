package client

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	completionv1 "github.com/completiond/completiond/gen/completion/v1"
)

// reconnectCase is one row of clients/testdata/reconnect.json, the rule
// the three client libraries share.
type reconnectCase struct {
	Name       string   `json:"name"`
	Code       string   `json:"code"`
	Reason     string   `json:"reason"`
	RetryDelay *float64 `json:"retry_delay_seconds"`
	Started    bool     `json:"started"`
	Result     bool     `json:"result"`
	Reconnect  bool     `json:"reconnect"`
	Restart    bool     `json:"restart"`
	MinWait    *float64 `json:"min_wait_seconds"`
}

func readReconnectCases(t *testing.T) []reconnectCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "clients", "testdata", "reconnect.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []reconnectCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) == 0 {
		t.Fatal("no cases")
	}
	return f.Cases
}

// end is the error a stream of the case ended with: io.EOF for OK, else
// the status with its ErrorInfo and RetryInfo.
func (c reconnectCase) end(t *testing.T) error {
	t.Helper()
	if c.Code == "OK" {
		return io.EOF
	}
	var code codes.Code
	if err := code.UnmarshalJSON([]byte(`"` + c.Code + `"`)); err != nil {
		t.Fatalf("%s: code %s: %v", c.Name, c.Code, err)
	}
	st := status.New(code, c.Name)
	var details []protoadapt.MessageV1
	if c.Reason != "" {
		details = append(details, &errdetails.ErrorInfo{Reason: c.Reason, Domain: Domain})
	}
	if c.RetryDelay != nil {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(seconds(*c.RetryDelay))})
	}
	if len(details) > 0 {
		var err error
		if st, err = st.WithDetails(details...); err != nil {
			t.Fatal(err)
		}
	}
	return st.Err()
}

// fold is what the stream had received: the started event, the result.
func (c reconnectCase) fold() *Fold {
	var f Fold
	if c.Started {
		f.Add(&completionv1.CompletionEvent{Seq: 1, Event: &completionv1.CompletionEvent_Started{Started: &completionv1.Started{CompletionId: "cmpl_r"}}})
	}
	if c.Result {
		f.Add(&completionv1.CompletionEvent{Seq: 2, Event: &completionv1.CompletionEvent_Result{Result: &completionv1.Result{}}})
	}
	return &f
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// TestReconnectRule: the library reconnects exactly in the cases of the
// shared table, and its first pause, with a random fraction of 0, is the
// status's RetryInfo delay (0 without).
func TestReconnectRule(t *testing.T) {
	zero := Reconnect{Backoff: 50 * time.Millisecond, MaxBackoff: time.Second, Rand: func() float64 { return 0 }}
	for _, c := range readReconnectCases(t) {
		err := c.end(t)
		if got := restartable(context.Background(), err, c.fold()); got != c.Restart {
			t.Errorf("%s: restart %v, want %v", c.Name, got, c.Restart)
		}
		if got := dropped(context.Background(), err, c.fold()); got != c.Reconnect {
			t.Errorf("%s: reconnect %v, want %v", c.Name, got, c.Reconnect)
			continue
		}
		if c.Reconnect {
			if got, want := zero.wait(1, retryDelay(err)), seconds(*c.MinWait); got != want {
				t.Errorf("%s: first pause %v, want %v", c.Name, got, want)
			}
		}
	}
	// The caller's own cancellation is final, whatever the status.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if dropped(ctx, status.Error(codes.Unavailable, "drop"), reconnectCase{Started: true}.fold()) {
		t.Error("a cancelled stream reconnects")
	}
}

// TestReconnectJitter: each pause is the random fraction of that try's
// backoff (50 ms doubling to 1 s), never less than the RetryInfo delay.
func TestReconnectJitter(t *testing.T) {
	var fraction float64
	r := Reconnect{Backoff: 50 * time.Millisecond, MaxBackoff: time.Second, Rand: func() float64 { return fraction }}
	for _, tc := range []struct {
		try         int
		fraction    float64
		floor, want time.Duration
	}{
		{1, 0.5, 0, 25 * time.Millisecond},
		{2, 0.5, 0, 50 * time.Millisecond},
		{5, 0.25, 0, 200 * time.Millisecond},
		{6, 0.999, 0, 999 * time.Millisecond},
		{40, 0.1, 0, 100 * time.Millisecond},
		{1, 0.1, time.Second, time.Second},
		{6, 0.9, 500 * time.Millisecond, 900 * time.Millisecond},
	} {
		fraction = tc.fraction
		if got := r.wait(tc.try, tc.floor); got != tc.want {
			t.Errorf("wait(%d, %v) with fraction %v = %v, want %v", tc.try, tc.floor, tc.fraction, got, tc.want)
		}
	}
	// Without Rand, the pauses are random within the backoff.
	d := Reconnect{Backoff: 50 * time.Millisecond, MaxBackoff: time.Second}
	for range 100 {
		if w := d.wait(3, 0); w < 0 || w >= 200*time.Millisecond {
			t.Fatalf("wait(3) = %v, want in [0, 200ms)", w)
		}
	}
}
