package fleet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestPresence: a process is present while it runs, gone a lease after it
// died (Halt: no renewal, no release), and gone at once when it closes.
func TestPresence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		leases := NewMemLeases(time.Second)
		present := func(instance string) bool {
			t.Helper()
			ok, err := Present(ctx, leases, instance)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		a, b := NewPresence(leases, NewInstance("A")), NewPresence(leases, NewInstance("A"))
		if a.Instance() == b.Instance() {
			t.Fatalf("two processes of replica A share the instance %q", a.Instance())
		}
		time.Sleep(5 * time.Second) // renewed all along
		if !present(a.Instance()) || !present(b.Instance()) {
			t.Fatal("a running process is not present")
		}
		a.Halt() // killed
		time.Sleep(time.Second + TimingOf(leases).RenewEvery())
		if present(a.Instance()) {
			t.Error("a killed process is still present a lease later")
		}
		a.Close()
		b.Close()
		if present(b.Instance()) {
			t.Error("a closed process is still present")
		}
		if present("A/nobody") {
			t.Error("a process that never ran is present")
		}
	})
}
