package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/completiond/completiond/config"
	"github.com/redis/go-redis/v9"
)

// RedisTimeout bounds the dial, each read and each write of the client
// NewRedisClient builds, so that a Redis that stops answering is noticed
// within it (health, and the event log's degrading to memory).
const RedisTimeout = time.Second

// NewRedisClient builds the client of Config.Redis from a redis:// or
// rediss:// (TLS, the server's name checked against the system's roots)
// URL: redis://[user[:password]@]host:port[/db]; with cluster, a cluster
// client of the Redis Cluster that the URL's node (and its ?addr=host:port
// parameters) belong to, whose other nodes it learns from them
// (config.ParseRedisClusterURL). A password that is not empty replaces the
// URL's: it comes from the environment (COMPLETIOND_REDIS_PASSWORD), so
// that it shows neither in a process list nor in a file. Errors never hold
// the password.
func NewRedisClient(rawURL, password string, cluster bool) (redis.UniversalClient, error) {
	if cluster {
		opt, err := config.ParseRedisClusterURL(rawURL)
		if err != nil {
			return nil, err
		}
		if password != "" {
			opt.Password = password
		}
		opt.ContextTimeoutEnabled = true
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = RedisTimeout, RedisTimeout, RedisTimeout
		return redis.NewClusterClient(opt), nil
	}
	opt, err := config.ParseRedisURL(rawURL)
	if err != nil {
		return nil, err
	}
	if password != "" {
		opt.Password = password
	}
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = RedisTimeout, RedisTimeout, RedisTimeout
	return redis.NewClient(opt), nil
}

// SetRedisLogger sends the Redis client's own messages (its reconnects)
// to log at DEBUG: the server logs what they mean for it at WARN (Redis
// unreachable, a completion kept in memory only).
func SetRedisLogger(log *slog.Logger) { redis.SetLogger(redisLogger{log}) }

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client", "message", fmt.Sprintf(format, v...))
}
