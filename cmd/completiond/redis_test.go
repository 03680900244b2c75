package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/completiond/completiond/internal/redistest"
	"github.com/completiond/completiond/internal/testkit"
)

const redisPassword = "redis-LEAKCHECK-7c6b5a"

// TestCheckConfigShowsRedisWithoutItsPassword: check-config names the
// Redis of the file, its password replaced.
func TestCheckConfigShowsRedisWithoutItsPassword(t *testing.T) {
	path := writeConfig(t, "providers: {s: {kind: sim}}\nroutes: {sim: {provider: s, model: sim-1}}\n"+
		"redis:\n  url: rediss://app:"+redisPassword+"@redis.internal:6380/3\n")
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"check-config", path}, checkEnv, &out, &errOut); err != nil {
		t.Fatalf("check-config: %v\n%s", err, errOut.String())
	}
	if got := squeeze(out.String()); !strings.Contains(got, "redis rediss://app:xxxxx@redis.internal:6380/3\n") {
		t.Errorf("no redis line:\n%s", got)
	}
	if strings.Contains(out.String()+errOut.String(), redisPassword) {
		t.Errorf("the output holds the Redis password:\n%s", out.String())
	}
	out.Reset()
	if err := run(t.Context(), []string{"check-config", writeConfig(t, fullConfig)}, checkEnv, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if got := squeeze(out.String()); !strings.Contains(got, "redis off (single process)\n") {
		t.Errorf("no redis off line:\n%s", got)
	}
}

// TestServesWithRedis: --redis-url (or COMPLETIOND_REDIS_URL) with the
// password in COMPLETIOND_REDIS_PASSWORD, or in the URL, reaches a Redis
// that requires it: health is SERVING, a completion runs; the logs name
// Redis but never its password.
func TestServesWithRedis(t *testing.T) {
	rs := redistest.New(t, "--requirepass", redisPassword)
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
	}{
		"flag and password apart": {args: []string{"--redis-url", "redis://" + rs.Addr}, env: map[string]string{redisPasswordEnv: redisPassword}},
		"password in the url env": {env: map[string]string{"COMPLETIOND_REDIS_URL": "redis://:" + redisPassword + "@" + rs.Addr}},
	} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{"COMPLETIOND_ADDR": "127.0.0.1:0", "COMPLETIOND_SIM_PACE": "1ms", "COMPLETIOND_LOG_LEVEL": "DEBUG"}
			for k, v := range tc.env {
				env[k] = v
			}
			ctx, stop := context.WithCancel(t.Context())
			logs, logw := io.Pipe()
			all := &testkit.SyncBuffer{}
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, tc.args, func(k string) string { return env[k] }, logw, io.Discard)
				logw.Close()
			}()
			tee := io.TeeReader(logs, all)
			addr := waitForAddr(t, tee)
			copied := make(chan struct{})
			go func() { _, _ = io.Copy(io.Discard, tee); close(copied) }()
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			deadline := time.Now().Add(10 * time.Second)
			for {
				h, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
				if err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("health: %v %v", h, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			streamOnce(t, conn)
			stop()
			if err := <-done; err != nil {
				t.Fatalf("run: %v", err)
			}
			<-copied
			out := all.String()
			if !strings.Contains(out, `"redis":"redis://`) {
				t.Errorf("the serving line does not name Redis:\n%s", out)
			}
			if strings.Contains(out, redisPassword) {
				t.Errorf("the logs hold the Redis password:\n%s", out)
			}
			if strings.Contains(out, "memory only") {
				t.Errorf("a completion was not logged in Redis:\n%s", out)
			}
		})
	}
}
