package fleet

import (
	"testing"

	"github.com/completiond/completiond/internal/redisscript"
)

// TestScripts: every script of lua/ is loaded once in each keyspace, and
// touches only the keys it declares, named in the keyspace's table.
func TestScripts(t *testing.T) {
	for _, ks := range []*keyspace{oneRedis, clusterRedis} {
		for _, p := range redisscript.Audit(luaFiles, append(ks.scripts.all(), idemScript)...) {
			t.Errorf("%d shards: %s", ks.shards, p)
		}
	}
}
