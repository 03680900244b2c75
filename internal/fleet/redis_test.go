package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/completiond/completiond/config"
	"github.com/completiond/completiond/internal/redistest"
)

// The go-redis client's own messages (reconnects while a test stops
// Redis) are not the tests' output.
func init() { SetRedisLogger(slog.New(slog.DiscardHandler)) }

const redisSecret = "s3cret-LEAKCHECK-redis"

func TestParseRedisURL(t *testing.T) {
	tests := []struct {
		url     string
		addr    string
		tls     bool
		pass    string
		db      int
		wantErr bool
	}{
		{url: "redis://localhost:6379", addr: "localhost:6379"},
		{url: "redis://:" + redisSecret + "@redis.internal:6380/2", addr: "redis.internal:6380", pass: redisSecret, db: 2},
		{url: "rediss://user:" + redisSecret + "@redis.example.com:6380", addr: "redis.example.com:6380", tls: true, pass: redisSecret},
		{url: "http://:" + redisSecret + "@localhost:6379", wantErr: true},
		{url: "redis://:" + redisSecret + "@localhost:6379/notadb", wantErr: true},
		{url: "localhost:6379", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(config.RedactRedisURL(tt.url), func(t *testing.T) {
			opt, err := config.ParseRedisURL(tt.url)
			if tt.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				if strings.Contains(err.Error(), redisSecret) {
					t.Fatalf("the error holds the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if opt.Addr != tt.addr || (opt.TLSConfig != nil) != tt.tls || opt.Password != tt.pass || opt.DB != tt.db {
				t.Fatalf("got addr %s tls %v password %q db %d", opt.Addr, opt.TLSConfig != nil, opt.Password, opt.DB)
			}
			if tt.tls && opt.TLSConfig.ServerName != "redis.example.com" {
				t.Fatalf("TLS server name %q", opt.TLSConfig.ServerName)
			}
			if shown := config.RedactRedisURL(tt.url); strings.Contains(shown, redisSecret) {
				t.Fatalf("RedactRedisURL shows the password: %s", shown)
			}
		})
	}
}

// TestParseRedisClusterURL: a Cluster's URL names its nodes to start
// from (the host, then each addr parameter), its password and TLS; a
// database other than 0, or a scheme that is not Redis's, is refused
// without the password in the error.
func TestParseRedisClusterURL(t *testing.T) {
	tests := []struct {
		url     string
		addrs   []string
		tls     bool
		pass    string
		wantErr bool
	}{
		{url: "redis://10.0.0.1:7000", addrs: []string{"10.0.0.1:7000"}},
		{url: "redis://:" + redisSecret + "@a:7000/0?addr=b:7001&addr=c:7002", addrs: []string{"a:7000", "b:7001", "c:7002"}, pass: redisSecret},
		{url: "rediss://user:" + redisSecret + "@redis.example.com:6380", addrs: []string{"redis.example.com:6380"}, tls: true, pass: redisSecret},
		{url: "redis://:" + redisSecret + "@a:7000/2", wantErr: true},
		{url: "redis://:" + redisSecret + "@a:7000?nope=1", wantErr: true},
		{url: "http://:" + redisSecret + "@a:7000", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(config.RedactRedisURL(tt.url), func(t *testing.T) {
			opt, err := config.ParseRedisClusterURL(tt.url)
			if tt.wantErr {
				if err == nil || strings.Contains(err.Error(), redisSecret) {
					t.Fatalf("err = %v, want one without the password", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(opt.Addrs, tt.addrs) || (opt.TLSConfig != nil) != tt.tls || opt.Password != tt.pass {
				t.Fatalf("got addrs %v tls %v password %q", opt.Addrs, opt.TLSConfig != nil, opt.Password)
			}
		})
	}
}

// TestRedisClusterClient: with cluster, NewRedisClient builds a cluster
// client from one node's URL, which finds the others (a key of each node
// written), and the password given apart is used.
func TestRedisClusterClient(t *testing.T) {
	nodes := redistest.NewCluster(t, 3, "--requirepass", redisSecret, "--masterauth", redisSecret)
	rdb, err := NewRedisClient("redis://"+nodes[0].Addr, redisSecret, true)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("a %T, want a cluster client", rdb)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 30 {
		if err := cc.Set(ctx, fmt.Sprint("k", i), i, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var written []string
	var mu sync.Mutex
	err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		n, err := c.DBSize(ctx).Result()
		if n > 0 {
			mu.Lock()
			written = append(written, c.Options().Addr)
			mu.Unlock()
		}
		return err
	})
	if err != nil || len(written) != 3 {
		t.Fatalf("keys written on %v (%v), want all three nodes", written, err)
	}
}

// TestRedisPasswordFromTheEnvironment: a Redis that requires a password
// answers the client built from a URL without one and the password given
// apart; the password in the URL works as well.
func TestRedisPasswordFromTheEnvironment(t *testing.T) {
	rs := redistest.New(t, "--requirepass", redisSecret)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, build := range map[string]func() (redis.UniversalClient, error){
		"apart": func() (redis.UniversalClient, error) { return NewRedisClient("redis://"+rs.Addr, redisSecret, false) },
		"in url": func() (redis.UniversalClient, error) {
			return NewRedisClient("redis://:"+redisSecret+"@"+rs.Addr, "", false)
		},
		"missing": func() (redis.UniversalClient, error) { return NewRedisClient("redis://"+rs.Addr, "", false) },
	} {
		rdb, err := build()
		if err != nil {
			t.Fatal(err)
		}
		err = rdb.Ping(ctx).Err()
		_ = rdb.Close()
		if (err == nil) != (name != "missing") {
			t.Errorf("%s: PING: %v", name, err)
		}
	}
}

// TestFileConfigRedis: redis.url of a file, with ${VAR} expanded, lands
// in Config.RedisURL; a bad one is an error that names the field and not
// the password.
func TestFileConfigRedis(t *testing.T) {
	env := map[string]string{"REDIS_PASSWORD": redisSecret}
	getenv := func(k string) string { return env[k] }
	load := func(body string) (config.Config, error) {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return config.LoadFile(path, config.Default(), getenv, nil)
	}
	cfg, err := load("redis:\n  url: rediss://:${REDIS_PASSWORD}@redis:6380/1\n")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RedisURL != "rediss://:"+redisSecret+"@redis:6380/1" {
		t.Fatalf("RedisURL = %q", cfg.RedisURL)
	}
	if cfg.LeaseTTL != 0 {
		t.Fatalf("LeaseTTL = %v without redis.lease_ttl", cfg.LeaseTTL)
	}
	if cfg, err = load("redis:\n  url: redis://redis:6379\n  lease_ttl: 750ms\n"); err != nil || cfg.LeaseTTL != 750*time.Millisecond {
		t.Fatalf("redis.lease_ttl: %v %v", cfg.LeaseTTL, err)
	}
	for _, body := range []string{"redis:\n  url: redis://redis:6379\n  lease_ttl: soon\n", "redis:\n  url: redis://redis:6379\n  lease_ttl: -1s\n"} {
		if _, err := load(body); err == nil || !strings.Contains(err.Error(), "redis.lease_ttl") {
			t.Errorf("%q: err = %v", body, err)
		}
	}
	if cfg.RedisCommitDelay != 0 {
		t.Fatalf("RedisCommitDelay = %v without redis.commit_delay", cfg.RedisCommitDelay)
	}
	if cfg, err = load("redis:\n  url: redis://redis:6379\n  commit_delay: 5ms\n"); err != nil || cfg.RedisCommitDelay != 5*time.Millisecond {
		t.Fatalf("redis.commit_delay: %v %v", cfg.RedisCommitDelay, err)
	}
	for _, delay := range []string{"soon", "0s", "-1ms", "101ms"} {
		body := "redis:\n  url: redis://redis:6379\n  commit_delay: " + delay + "\n"
		if _, err := load(body); err == nil || !strings.Contains(err.Error(), "redis.commit_delay") {
			t.Errorf("%q: err = %v", body, err)
		}
	}
	if cfg.RedisCluster {
		t.Fatal("RedisCluster without redis.cluster")
	}
	if cfg, err = load("redis:\n  url: redis://:${REDIS_PASSWORD}@a:7000?addr=b:7001\n  cluster: true\n"); err != nil || !cfg.RedisCluster {
		t.Fatalf("redis.cluster: %v %v", cfg.RedisCluster, err)
	}
	for _, body := range []string{"redis:\n  url: ftp://:${REDIS_PASSWORD}@redis:6380\n",
		"redis:\n  url: redis://:${REDIS_PASSWORD}@a:7000/1\n  cluster: true\n", // one database only
		"redis:\n  url: redis://:${REDIS_PASSWORD}@a:7000?addr=b:7001\n",        // addr: a Cluster's
		"redis:\n  url: \"\"\n", "redis:\n  url: ${NOT_SET}\n"} {
		_, err := load(body)
		if err == nil || !strings.Contains(err.Error(), "redis.url") || strings.Contains(err.Error(), redisSecret) {
			t.Errorf("%q: err = %v", body, err)
		}
	}
}
