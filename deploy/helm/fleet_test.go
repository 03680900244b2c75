package helm

import (
	"encoding/base64"
	"strings"
	"testing"
)

// checkRedis asserts that the server gets the Redis url, and its password
// from the Secret's key — never as a value (secret "" for no password).
func checkRedis(t *testing.T, c container, url, secret, key string) {
	t.Helper()
	if v, _ := c.env("COMPLETIOND_REDIS_URL"); v != url {
		t.Errorf("COMPLETIOND_REDIS_URL = %q, want %q", v, url)
	}
	for _, e := range c.Env {
		if e.Name != "COMPLETIOND_REDIS_PASSWORD" {
			continue
		}
		if secret == "" {
			t.Errorf("COMPLETIOND_REDIS_PASSWORD = %+v for a Redis without a password", e)
			return
		}
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("COMPLETIOND_REDIS_PASSWORD is not from a Secret: %+v", e)
			return
		}
		if ref := e.ValueFrom.SecretKeyRef; ref.Name != secret || ref.Key != key {
			t.Errorf("COMPLETIOND_REDIS_PASSWORD from %s/%s, want %s/%s", ref.Name, ref.Key, secret, key)
		}
		return
	}
	if secret != "" {
		t.Error("no COMPLETIOND_REDIS_PASSWORD")
	}
}

// TestFleetNeedsRedis: more than one replica, or an autoscaler that may
// run more, renders only with a Redis the replicas share; otherwise a
// caller's reconnect through the Service would land on a pod that knows
// nothing of its completion.
func TestFleetNeedsRedis(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"replicaCount=2", "replicaCount=2 needs Redis"},
		{"autoscaling.enabled=true", "autoscaling.maxReplicas=10 needs Redis"},
		{"autoscaling.enabled=true,autoscaling.minReplicas=1,autoscaling.maxReplicas=2,replicaCount=1", "autoscaling.maxReplicas=2 needs Redis"},
		{"redis.url=redis://:hunter2@redis:6379,replicaCount=2", "redis.url holds a password"},
		{"redis.url=redis://user:hunter2@redis:6379", "redis.url holds a password"},
		{"redis.url=redis://redis:6379,redis.inChart.enabled=true", "choose one Redis"},
		{"redis.cluster=true,redis.inChart.enabled=true", "not a Cluster"},
	} {
		_, err := template(t, "--set", tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: error %v, want one containing %q", tc.set, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("--set %s: the error shows the password: %v", tc.set, err)
		}
	}
	// One replica at most needs none.
	for _, set := range []string{"replicaCount=1", "autoscaling.enabled=true,autoscaling.minReplicas=1,autoscaling.maxReplicas=1,replicaCount=5"} {
		m := render(t, "--set", set)
		_, c := deployment(t, m)
		checkRedis(t, c, "", "", "")
	}
}

// TestFleetExistingRedis: an existing Redis by URL, its password from a
// Secret of the operator's, as many replicas as asked.
func TestFleetExistingRedis(t *testing.T) {
	m := render(t, "--set", "replicaCount=3,redis.url=rediss://redis.internal:6380/2,redis.password.existingSecret=fleet,redis.password.existingSecretKey=pw")
	d, c := deployment(t, m)
	checkSafe(t, d, c)
	if d.Replicas == nil || *d.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", deref(d.Replicas))
	}
	checkRedis(t, c, "rediss://redis.internal:6380/2", "fleet", "pw")
	if n := m.count("Deployment"); n != 1 {
		t.Errorf("%d Deployments: a Redis next to an existing one", n)
	}
	if _, ok := c.env("COMPLETIOND_LEASE_TTL"); ok {
		t.Error("COMPLETIOND_LEASE_TTL without redis.leaseTTL")
	}
	if _, ok := c.env("COMPLETIOND_REDIS_COMMIT_DELAY"); ok {
		t.Error("COMPLETIOND_REDIS_COMMIT_DELAY without redis.commitDelay")
	}
	if _, ok := c.env("COMPLETIOND_REDIS_CLUSTER"); ok {
		t.Error("COMPLETIOND_REDIS_CLUSTER without redis.cluster")
	}
	// A Redis Cluster: one node's URL, the others found from it.
	_, c = deployment(t, render(t, "--set", "replicaCount=3,redis.url=redis://redis-cluster:6379,redis.cluster=true"))
	checkRedis(t, c, "redis://redis-cluster:6379", "", "")
	if v, ok := c.env("COMPLETIOND_REDIS_CLUSTER"); !ok || v != "true" {
		t.Errorf("COMPLETIOND_REDIS_CLUSTER = %q, %v with redis.cluster=true", v, ok)
	}

	// A Redis without a password; and one the config file names.
	_, c = deployment(t, render(t, "--set", "replicaCount=2,redis.url=redis://redis:6379"))
	checkRedis(t, c, "redis://redis:6379", "", "")
	for _, args := range [][]string{
		{"--set", "replicaCount=2,config.redis.url=redis://redis:6379"},
		{"--set", "replicaCount=2", "--set-string", "config=redis:\n  url: redis://redis:6379\n"},
		{"--set", "replicaCount=2,redis.inConfig=true,existingConfigMap=mine"},
	} {
		_, c := deployment(t, render(t, args...))
		checkRedis(t, c, "", "", "")
	}
}

// redisSpec is the in-chart Redis's Deployment, as far as the test reads it.
type redisSpec struct {
	Replicas *int `yaml:"replicas"`
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Template struct {
		Spec struct {
			AutomountServiceAccountToken *bool       `yaml:"automountServiceAccountToken"`
			Containers                   []container `yaml:"containers"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

// TestFleetInChartRedis: redis.inChart.enabled runs a Redis in the release
// with a generated password, which the replicas read from its Secret and
// which appears in no manifest in plain text.
func TestFleetInChartRedis(t *testing.T) {
	text, err := templateText(t, "--set", "replicaCount=2,redis.inChart.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	m := decodeManifests(t, text)
	if n := m.count("Deployment"); n != 2 {
		t.Fatalf("%d Deployments, want the server's and Redis's", n)
	}
	server := decodeSpec[deploymentSpec](t, m.named(t, "Deployment", "rel-completiond"))
	c := server.Template.Spec.Containers[0]
	checkSafe(t, server, c)
	checkRedis(t, c, "redis://rel-completiond-redis.llm.svc:6379/0", "rel-completiond-redis", "redis-password")
	if server.Template.Metadata.Annotations["checksum/redis"] == "" {
		t.Error("no checksum/redis: a new Redis password would not roll the replicas")
	}

	secret := m.named(t, "Secret", "rel-completiond-redis")
	password := decode64(t, secret.Data["redis-password"])
	if len(password) < 32 {
		t.Errorf("generated password %d characters long", len(password))
	}
	if conf := decode64(t, secret.Data["redis.conf"]); !strings.Contains(conf, "requirepass "+password+"\n") {
		t.Errorf("redis.conf does not require the password of redis-password:\n%s", conf)
	}
	if strings.Contains(text, password) {
		t.Error("the Redis password is in the rendered manifests in plain text")
	}

	redis := decodeSpec[redisSpec](t, m.named(t, "Deployment", "rel-completiond-redis"))
	checkRedisPod(t, redis)
	// Neither the server's Service nor its PodDisruptionBudget selects Redis.
	service := decodeSpec[struct {
		Selector map[string]string `yaml:"selector"`
	}](t, m.named(t, "Service", "rel-completiond"))
	if selects(service.Selector, redis.Selector.MatchLabels) {
		t.Errorf("the server's Service (%v) selects the Redis pod (%v)", service.Selector, redis.Selector.MatchLabels)
	}
	if s := decodeSpec[struct {
		Ports []struct{ Port int } `yaml:"ports"`
	}](t, m.named(t, "Service", "rel-completiond-redis")); len(s.Ports) != 1 || s.Ports[0].Port != 6379 {
		t.Errorf("Redis Service ports %+v, want 6379", s.Ports)
	}
}

// checkRedisPod asserts the in-chart Redis runs once, unprivileged, with
// its configuration from the Secret.
func checkRedisPod(t *testing.T, d redisSpec) {
	t.Helper()
	if d.Replicas == nil || *d.Replicas != 1 || len(d.Template.Spec.Containers) != 1 {
		t.Fatalf("Redis Deployment: replicas %v, %d containers; want 1 and 1", deref(d.Replicas), len(d.Template.Spec.Containers))
	}
	c := d.Template.Spec.Containers[0]
	sc := c.SecurityContext
	if !isTrue(sc.RunAsNonRoot) || !isTrue(sc.ReadOnlyRootFilesystem) || !isFalse(sc.AllowPrivilegeEscalation) || len(sc.Capabilities.Drop) != 1 {
		t.Errorf("Redis securityContext = %+v", sc)
	}
	if !isFalse(d.Template.Spec.AutomountServiceAccountToken) {
		t.Error("the Redis pod mounts a service-account token")
	}
	for _, e := range c.Env {
		if strings.Contains(strings.ToLower(e.Name), "pass") {
			t.Errorf("Redis gets its password from the environment (%s), not from redis.conf", e.Name)
		}
	}
	if c.Resources.Limits["memory"] == "" {
		t.Error("Redis without a memory limit")
	}
}

// selects reports whether a selector matches every label it names in labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func decode64(t *testing.T, s string) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return string(b)
}
