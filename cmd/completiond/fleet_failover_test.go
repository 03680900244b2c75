package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/completiond/completiond/client"
	completionv1 "github.com/completiond/completiond/gen/completion/v1"
	"github.com/completiond/completiond/internal/redistest"
)

// TestFleetClusterFailover: two completiond processes share a Redis
// Cluster of three primaries with a replica each; a resumable Stream runs
// through A while every primary hands its slots to its replica — without
// loss (CLUSTER FAILOVER), or with each replica cut off from its primary
// for two tokens, the primaries killed, and the replicas taking over
// (CLUSTER FAILOVER TAKEOVER: the events those primaries acknowledged are
// lost) before the next token. The Stream finishes whole, and an attach
// through B reads every seq once and the whole answer, the lost events
// included (A's next write found the hole, and A published them again).
func TestFleetClusterFailover(t *testing.T) {
	bin := buildCompletiond(t)
	for _, tc := range []struct {
		name        string
		lossy, busy bool
	}{
		{"failover", false, true},
		{"takeover after lost writes", true, false},
		// The writer writes every 20 ms, and the replicas take over at
		// once: its first write to a promoted replica finds the script
		// missing (Redis does not replicate scripts), and runs again
		// checked.
		{"takeover at once after lost writes, the writer busy", true, true},
	} {
		lossy := tc.lossy
		t.Run(tc.name, func(t *testing.T) {
			primaries, replicas := redistest.NewReplicatedCluster(t, 3)
			nodes := append(append([]*redistest.Server(nil), primaries...), replicas...)
			url := clusterURL(nodes)
			a := startReplicaOn(t, bin, "A", url, nil, "--redis-cluster", "--lease-ttl", "3s")
			b := startReplicaOn(t, bin, "B", url, nil, "--redis-cluster", "--lease-ttl", "3s")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			meta := map[string]string{"sim.pace": "20ms", "sim.words": "60"}
			if !tc.busy {
				// A token a second: the writer is idle while the primaries
				// die and the replicas take over, as a completion waiting
				// on a slow model or on its tools, so that no write of it
				// fails meanwhile.
				meta = map[string]string{"sim.pace": "1s", "sim.words": "8"}
			}
			st, err := connect(t, a).Stream(ctx, &completionv1.CompleteRequest{
				Messages:    []*completionv1.Message{{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: "through a failover"}}}}}},
				Metadata:    meta,
				ResumeGrace: durationpb.New(30 * time.Second),
			})
			if err != nil {
				t.Fatal(err)
			}
			deltas := func(n int) {
				t.Helper()
				for seen := 0; seen < n; {
					ev, err := st.Recv()
					if err != nil {
						t.Fatal(err)
					}
					if ev.GetDelta() != nil {
						seen++
					}
				}
			}
			if !lossy {
				deltas(5)
				for _, r := range replicas {
					redistest.Failover(t, r, false, nodes)
				}
			} else {
				if tc.busy {
					deltas(5)
				}
				deltas(2)
				for i, r := range replicas {
					redistest.Synced(t, primaries[i], r)
					r.Pause()
					redistest.CutReplicas(t, primaries[i])
				}
				deltas(2) // acknowledged by the primaries only
				for i, r := range replicas {
					primaries[i].Stop()
					r.Resume()
				}
				for _, r := range replicas {
					redistest.Failover(t, r, true, nodes)
				}
			}
			fold, err := st.Wait()
			if err != nil {
				t.Fatalf("the Stream through A: %v", err)
			}
			want := resultText(fold.Result())
			if fold.Reason() != completionv1.TransitionReason_TRANSITION_REASON_COMPLETED || fold.Text() != want {
				t.Fatalf("the Stream through A ended %s with %q, result %q", fold.Reason(), fold.Text(), want)
			}
			// Through B, once A has published what Redis lost (its next
			// event, or its end once Redis answers).
			var last error
			for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if last = attachedWhole(ctx, connect(t, b), fold.CompletionID(), want); last == nil {
					return
				}
			}
			t.Fatalf("attach through B: %v", last)
		})
	}
}

// clusterURL is the --redis-url of a Cluster of nodes.
func clusterURL(nodes []*redistest.Server) string {
	url := "redis://" + nodes[0].Addr
	for i, n := range nodes[1:] {
		url += map[bool]string{true: "?", false: "&"}[i == 0] + "addr=" + n.Addr
	}
	return url
}

// TestFleetClusterFailoverLosesTheEnd: a resumable Stream through A ends
// while every replica of the Cluster is cut off from its primary; the
// primaries die and the replicas take over, so that Redis lost the
// completion's last events and its end, and A writes nothing more of it.
// Its log looked live: a replica an attach reached would take the
// completion over and run it on, to another ending than A's caller got.
// A's health finds the promoted processes and A publishes the log again;
// an attach through B reads exactly what A's caller read:
//   - once A published it again;
//   - at once after a takeover that came later than the lease (an
//     automatic failover waits cluster-node-timeout), the lease lapsed:
//     B finds the new processes too and waits for A rather than take the
//     completion over.
func TestFleetClusterFailoverLosesTheEnd(t *testing.T) {
	bin := buildCompletiond(t)
	for _, tc := range []struct {
		name   string
		outage time.Duration // between the primaries' death and the takeover
	}{
		{"attach once A published the end again", 0},
		{"attach at once, the lease lapsed", 3500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) { lostEnd(t, bin, tc.outage) })
	}
}

// lostEnd is TestFleetClusterFailoverLosesTheEnd with the primaries dead
// for outage before the takeover; without one, B attaches once A said it
// published the end again, else at once.
func lostEnd(t *testing.T, bin string, outage time.Duration) {
	primaries, replicas := redistest.NewReplicatedCluster(t, 3)
	nodes := append(append([]*redistest.Server(nil), primaries...), replicas...)
	a := startReplicaOn(t, bin, "A", clusterURL(nodes), nil, "--redis-cluster", "--lease-ttl", "3s")
	b := startReplicaOn(t, bin, "B", clusterURL(nodes), nil, "--redis-cluster", "--lease-ttl", "3s")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := connect(t, a).Stream(ctx, &completionv1.CompleteRequest{
		Messages:    []*completionv1.Message{{Role: completionv1.Role_ROLE_USER, Content: []*completionv1.ContentBlock{{Block: &completionv1.ContentBlock_Text{Text: &completionv1.TextBlock{Text: "ends through a failover"}}}}}},
		Metadata:    map[string]string{"sim.pace": "250ms", "sim.words": "8"},
		ResumeGrace: durationpb.New(30 * time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	var seen []*completionv1.CompletionEvent
	for deltas := 0; deltas < 2; {
		ev, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev)
		if ev.GetDelta() != nil {
			deltas++
		}
	}
	for i, r := range replicas { // each replica has the log so far
		redistest.Synced(t, primaries[i], r)
	}
	for i, r := range replicas { // and none gets more (the answer goes on a second and a half)
		r.Pause()
		redistest.CutReplicas(t, primaries[i])
	}
	for { // the rest, and the end: acknowledged by the primaries only
		ev, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the Stream through A: %v", err)
		}
		seen = append(seen, ev)
	}
	if len(seen) == 0 || seen[len(seen)-1].GetResult() == nil {
		t.Fatal("the Stream through A ended without its result")
	}
	for i, r := range replicas {
		primaries[i].Stop()
		r.Resume()
	}
	time.Sleep(outage)
	for _, r := range replicas {
		redistest.Failover(t, r, true, nodes)
	}
	const republished = "a completion's end was lost by Redis"
	for deadline := time.Now().Add(15 * time.Second); outage == 0 && !strings.Contains(a.logs.String(), republished); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("A did not publish again the end Redis lost (its log says %q)", republished)
		}
	}
	got, err := attachAll(ctx, connect(t, b), seen[0].GetStarted().GetCompletionId())
	if err != nil {
		t.Fatalf("attach through B after %d events: %v", len(got), err)
	}
	if len(got) != len(seen) {
		t.Fatalf("attach through B read %d events, A's caller %d", len(got), len(seen))
	}
	for i := range got {
		if !proto.Equal(got[i], seen[i]) {
			t.Fatalf("event %d through B:\n%v\nthrough A:\n%v", i, got[i], seen[i])
		}
	}
}

// attachAll attaches to id through c from its start and reads every
// event until the end: the events read, and the error that ended the
// reading early, if any.
func attachAll(ctx context.Context, c *client.Client, id string) ([]*completionv1.CompletionEvent, error) {
	at, err := c.Attach(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	var evs []*completionv1.CompletionEvent
	for {
		ev, err := at.Recv()
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

// attachedWhole attaches to id through c from its start, and says what is
// wrong with what it reads, if anything: every seq once, in order, the
// result last, and the text deltas want.
func attachedWhole(ctx context.Context, c *client.Client, id, want string) error {
	evs, err := attachAll(ctx, c, id)
	if err != nil {
		return err
	}
	for i, ev := range evs {
		if ev.GetSeq() != uint64(i+1) {
			return fmt.Errorf("event %d has seq %d", i, ev.GetSeq())
		}
	}
	if len(evs) == 0 || evs[len(evs)-1].GetResult() == nil {
		return errors.New("no result last")
	}
	if got := allText(evs); got != want {
		return fmt.Errorf("the deltas read %q, want %q", got, want)
	}
	if !strings.Contains(want, " ") {
		return fmt.Errorf("the answer %q is too short to tell", want)
	}
	return nil
}
