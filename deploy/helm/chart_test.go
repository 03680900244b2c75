package helm

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/completiond/completiond/service"
)

const chartDir = "completiond"

// helmBinary is $HELM, or the repository's bin/helm; the test is skipped
// without either, and fails when $HELM names a missing binary.
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		if _, err := exec.LookPath(h); err != nil {
			t.Fatalf("HELM=%s: %v", h, err)
		}
		return h
	}
	h, err := filepath.Abs(filepath.Join("..", "..", "bin", "helm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h); err != nil {
		t.Skip("no helm: make chart installs it into ./bin and runs this test")
	}
	return h
}

// object is one rendered manifest; only what the tests read is decoded.
type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec       yaml.Node         `yaml:"spec"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
}

type probe struct {
	GRPC *struct {
		Port    int     `yaml:"port"`
		Service *string `yaml:"service"`
	} `yaml:"grpc"`
	HTTPGet          any `yaml:"httpGet"`
	TCPSocket        any `yaml:"tcpSocket"`
	Exec             any `yaml:"exec"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

// grpcService is the health service a grpc probe asks: unset is "", the
// server's overall health.
func (p *probe) grpcService() string {
	if p.GRPC.Service == nil {
		return ""
	}
	return *p.GRPC.Service
}

type container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom []struct {
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Lifecycle *struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	StartupProbe   *probe `yaml:"startupProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		RunAsUser                *int  `yaml:"runAsUser"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		Privileged               *bool `yaml:"privileged"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
			Add  []string `yaml:"add"`
		} `yaml:"capabilities"`
		SeccompProfile struct {
			Type string `yaml:"type"`
		} `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

func (c container) env(name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func (c container) port(name string) int {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

type deploymentSpec struct {
	Replicas *int `yaml:"replicas"`
	Template struct {
		Metadata struct {
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"metadata"`
		Spec struct {
			AutomountServiceAccountToken  *bool `yaml:"automountServiceAccountToken"`
			TerminationGracePeriodSeconds int   `yaml:"terminationGracePeriodSeconds"`
			SecurityContext               struct {
				RunAsNonRoot   *bool `yaml:"runAsNonRoot"`
				RunAsUser      *int  `yaml:"runAsUser"`
				SeccompProfile struct {
					Type string `yaml:"type"`
				} `yaml:"seccompProfile"`
			} `yaml:"securityContext"`
			Containers []container `yaml:"containers"`
			Volumes    []struct {
				Name      string `yaml:"name"`
				ConfigMap *struct {
					Name  string `yaml:"name"`
					Items []struct{ Key, Path string }
				} `yaml:"configMap"`
				Secret *struct {
					SecretName  string `yaml:"secretName"`
					DefaultMode int    `yaml:"defaultMode"`
					Items       []struct{ Key, Path string }
				} `yaml:"secret"`
			} `yaml:"volumes"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

type serviceSpec struct {
	ClusterIP string `yaml:"clusterIP"`
	Ports     []struct {
		Name        string `yaml:"name"`
		Port        int    `yaml:"port"`
		TargetPort  string `yaml:"targetPort"`
		AppProtocol string `yaml:"appProtocol"`
	} `yaml:"ports"`
}

// manifests is a rendered chart, by kind and name.
type manifests []object

func (m manifests) get(t *testing.T, kind string) object {
	t.Helper()
	var found []object
	for _, o := range m {
		if o.Kind == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(found), kind)
	}
	return found[0]
}

func (m manifests) count(kind string) int {
	n := 0
	for _, o := range m {
		if o.Kind == kind {
			n++
		}
	}
	return n
}

func (m manifests) named(t *testing.T, kind, name string) object {
	t.Helper()
	for _, o := range m {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return object{}
}

func decodeSpec[T any](t *testing.T, o object) T {
	t.Helper()
	var v T
	if err := o.Spec.Decode(&v); err != nil {
		t.Fatalf("%s %s: %v", o.Kind, o.Metadata.Name, err)
	}
	return v
}

// templateText runs helm template with args, and returns its output or
// error.
func templateText(t *testing.T, args ...string) (string, error) {
	t.Helper()
	// The Kubernetes version is explicit: a helm built without its release
	// flags assumes 1.20, below the chart's kubeVersion. 1.30: the first
	// with lifecycle.preStop.sleep, which all-values.yaml uses.
	base := []string{"template", "rel", chartDir, "--namespace", "llm", "--kube-version", "1.30.0"}
	cmd := exec.Command(helmBinary(t), append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", errors.New(strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// template runs helm template with args, and returns what it rendered or
// its error.
func template(t *testing.T, args ...string) (manifests, error) {
	t.Helper()
	text, err := templateText(t, args...)
	if err != nil {
		return nil, err
	}
	return decodeManifests(t, text), nil
}

// decodeManifests decodes the objects of a rendered chart.
func decodeManifests(t *testing.T, text string) manifests {
	t.Helper()
	var out manifests
	dec := yaml.NewDecoder(strings.NewReader(text))
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("helm template output: %v", err)
		}
		if o.Kind != "" {
			out = append(out, o)
		}
	}
	return out
}

func render(t *testing.T, args ...string) manifests {
	t.Helper()
	m, err := template(t, args...)
	if err != nil {
		t.Fatalf("helm template %v: %v", args, err)
	}
	return m
}

func deployment(t *testing.T, m manifests) (deploymentSpec, container) {
	t.Helper()
	d := decodeSpec[deploymentSpec](t, m.get(t, "Deployment"))
	if n := len(d.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers, want 1", n)
	}
	return d, d.Template.Spec.Containers[0]
}

func isTrue(b *bool) bool { return b != nil && *b }

// deref prints an optional field: its value, or "unset".
func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}

func isFalse(b *bool) bool { return b != nil && !*b }

// checkSafe asserts what every rendering must keep: gRPC probes on the gRPC
// port, the non-root read-only security context, and a grace period longer
// than the server's own shutdown bound.
func checkSafe(t *testing.T, d deploymentSpec, c container) {
	t.Helper()
	grpcPort := c.port("grpc")
	if grpcPort != 50051 {
		t.Errorf("container port grpc = %d, want 50051", grpcPort)
	}
	if addr, _ := c.env("COMPLETIOND_ADDR"); addr != "0.0.0.0:50051" {
		t.Errorf("COMPLETIOND_ADDR = %q, want 0.0.0.0:50051", addr)
	}
	// Readiness follows Redis (the overall health); startup and liveness
	// must not, or a Redis outage would restart every pod.
	for _, pr := range []struct {
		name    string
		p       *probe
		service string
	}{
		{"startup", c.StartupProbe, service.ProcessHealthService},
		{"readiness", c.ReadinessProbe, ""},
		{"liveness", c.LivenessProbe, service.ProcessHealthService},
	} {
		switch p := pr.p; {
		case p == nil:
			t.Errorf("no %s probe", pr.name)
		case p.GRPC == nil || p.HTTPGet != nil || p.TCPSocket != nil || p.Exec != nil:
			t.Errorf("%s probe is not a grpc probe: %+v", pr.name, p)
		case p.GRPC.Port != grpcPort:
			t.Errorf("%s probe on port %d, want the gRPC port %d", pr.name, p.GRPC.Port, grpcPort)
		case p.grpcService() != pr.service:
			t.Errorf("%s probe asks service %q, want %q", pr.name, p.grpcService(), pr.service)
		}
	}

	ps := d.Template.Spec.SecurityContext
	if !isTrue(ps.RunAsNonRoot) || ps.RunAsUser == nil || *ps.RunAsUser != 65532 || ps.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("pod securityContext: runAsNonRoot %v, runAsUser %v, seccomp %q; want true, 65532, RuntimeDefault",
			deref(ps.RunAsNonRoot), deref(ps.RunAsUser), ps.SeccompProfile.Type)
	}
	sc := c.SecurityContext
	if !isTrue(sc.RunAsNonRoot) || !isTrue(sc.ReadOnlyRootFilesystem) || !isFalse(sc.AllowPrivilegeEscalation) || isTrue(sc.Privileged) {
		t.Errorf("container securityContext: runAsNonRoot %v, readOnlyRootFilesystem %v, allowPrivilegeEscalation %v, privileged %v; want true, true, false, false",
			deref(sc.RunAsNonRoot), deref(sc.ReadOnlyRootFilesystem), deref(sc.AllowPrivilegeEscalation), deref(sc.Privileged))
	}
	if len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 {
		t.Errorf("capabilities = %+v, want drop [ALL] and no add", sc.Capabilities)
	}
	if sc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("container seccomp = %q, want RuntimeDefault", sc.SeccompProfile.Type)
	}
	if !isFalse(d.Template.Spec.AutomountServiceAccountToken) {
		t.Error("the service account token is mounted; completiond does not use the API")
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Errorf("resources = %+v, want cpu and memory requests and a memory limit", c.Resources)
	}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("volume %s mounted writable at %s", m.Name, m.MountPath)
		}
	}

	// Shutdown: the kubelet must not kill a server still draining.
	shutdown := 0 * time.Second
	for _, name := range []string{"COMPLETIOND_DRAIN_TIMEOUT", "COMPLETIOND_SHUTDOWN_GRACE"} {
		v, ok := c.env(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		dur, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", name, v, err)
		}
		shutdown += dur
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		shutdown += time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	grace := time.Duration(d.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	if grace <= shutdown {
		t.Errorf("terminationGracePeriodSeconds = %v, want more than preStop + drain timeout + shutdown grace = %v", grace, shutdown)
	}
	// Liveness fails during a drain (NOT_SERVING): its window must outlast it.
	if lp := c.LivenessProbe; lp != nil {
		if w := time.Duration(lp.PeriodSeconds*lp.FailureThreshold) * time.Second; w <= shutdown {
			t.Errorf("liveness window %v is not longer than the shutdown %v: a draining pod would be restarted", w, shutdown)
		}
	}
}

func checkService(t *testing.T, m manifests, metrics bool) {
	t.Helper()
	s := decodeSpec[serviceSpec](t, m.get(t, "Service"))
	var names []string
	for _, p := range s.Ports {
		names = append(names, p.Name)
		switch p.Name {
		case "grpc":
			if p.Port != 50051 || p.TargetPort != "grpc" || p.AppProtocol != "grpc" {
				t.Errorf("service port grpc = %+v, want 50051 → grpc, appProtocol grpc", p)
			}
		case "metrics":
			if p.Port != 9464 || p.TargetPort != "metrics" {
				t.Errorf("service port metrics = %+v, want 9464 → metrics", p)
			}
		}
	}
	want := "grpc"
	if metrics {
		want = "grpc,metrics"
	}
	if got := strings.Join(names, ","); got != want {
		t.Errorf("service ports %s, want %s", got, want)
	}
}

// appVersion is the chart's appVersion: completiond's version, the default
// image tag.
func appVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion: "([^"]+)"$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("Chart.yaml has no quoted appVersion")
	}
	return string(m[1])
}

func TestDefaults(t *testing.T) {
	m := render(t)
	d, c := deployment(t, m)
	checkSafe(t, d, c)
	checkService(t, m, true)

	if want := "localhost/completiond:" + appVersion(t); c.Image != want {
		t.Errorf("image = %q, want %s, which make image tags", c.Image, want)
	}
	// One replica: more need a Redis (TestFleet), which is not there by default.
	if d.Replicas == nil || *d.Replicas != 1 {
		t.Errorf("replicas = %v, want 1", deref(d.Replicas))
	}
	for _, name := range []string{"COMPLETIOND_REDIS_URL", "COMPLETIOND_REDIS_PASSWORD", "COMPLETIOND_LEASE_TTL", "COMPLETIOND_REDIS_COMMIT_DELAY"} {
		if _, ok := c.env(name); ok {
			t.Errorf("%s without redis values", name)
		}
	}
	if got := d.Template.Spec.TerminationGracePeriodSeconds; got != 18 {
		t.Errorf("terminationGracePeriodSeconds = %d, want 10 + 3 + 5", got)
	}
	if v, _ := c.env("COMPLETIOND_METRICS_ADDR"); v != "0.0.0.0:9464" || c.port("metrics") != 9464 {
		t.Errorf("metrics: COMPLETIOND_METRICS_ADDR=%q, port %d", v, c.port("metrics"))
	}
	// Authentication is on by default: a generated key in a Secret, mounted
	// read-only as --api-key-file, never in the environment.
	if _, ok := c.env("COMPLETIOND_INSECURE_NO_AUTH"); ok {
		t.Error("authentication is off by default")
	}
	if _, ok := c.env("COMPLETIOND_API_KEY"); ok {
		t.Error("the API key is in the environment")
	}
	if v, _ := c.env("COMPLETIOND_API_KEY_FILE"); v != "/var/run/secrets/completiond/api-key" {
		t.Errorf("COMPLETIOND_API_KEY_FILE = %q", v)
	}
	key := m.named(t, "Secret", "rel-completiond-api-key")
	if len(key.Data["api-key"]) < 40 {
		t.Errorf("generated key %q too short", key.Data["api-key"])
	}
	if d.Template.Metadata.Annotations["checksum/api-key"] == "" {
		t.Error("no checksum/api-key: a new key would not roll the pods")
	}
	var mounted bool
	for _, v := range d.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "rel-completiond-api-key" && v.Secret.DefaultMode == 0o440 {
			mounted = true
		}
	}
	if !mounted {
		t.Error("the API key Secret is not mounted with mode 0440")
	}
	// No config file: the sim routes, and claude/gpt from provider keys.
	if _, ok := c.env("COMPLETIOND_CONFIG"); ok || m.count("ConfigMap") != 0 {
		t.Error("a config file without config values")
	}
	if len(c.EnvFrom) != 0 {
		t.Errorf("envFrom %+v without providerKeys", c.EnvFrom)
	}

	pdb := decodeSpec[map[string]any](t, m.get(t, "PodDisruptionBudget"))
	if pdb["maxUnavailable"] != 1 {
		t.Errorf("PodDisruptionBudget = %v, want maxUnavailable 1", pdb)
	}
	for _, kind := range []string{"HorizontalPodAutoscaler", "ServiceMonitor"} {
		if m.count(kind) != 0 {
			t.Errorf("%s rendered by default", kind)
		}
	}
}

func TestAllValues(t *testing.T) {
	m := render(t, "-f", filepath.Join(chartDir, "ci", "all-values.yaml"))
	d, c := deployment(t, m)
	checkSafe(t, d, c)
	checkService(t, m, true)

	if c.Image != "registry.example.com/completiond:1.2.3" {
		t.Errorf("image = %q", c.Image)
	}
	if d.Replicas != nil {
		t.Errorf("replicas = %d with an autoscaler", *d.Replicas)
	}
	// Up to 10 replicas: they share the Redis, its password from a Secret.
	checkRedis(t, c, "rediss://redis.example.com:6380/0", "fleet-redis", "password")
	if v, _ := c.env("COMPLETIOND_LEASE_TTL"); v != "3s" {
		t.Errorf("COMPLETIOND_LEASE_TTL = %q, want 3s", v)
	}
	if v, _ := c.env("COMPLETIOND_REDIS_COMMIT_DELAY"); v != "5ms" {
		t.Errorf("COMPLETIOND_REDIS_COMMIT_DELAY = %q, want 5ms", v)
	}
	if got := d.Template.Spec.TerminationGracePeriodSeconds; got != 60 {
		t.Errorf("terminationGracePeriodSeconds = %d, want 60", got)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds != 5 {
		t.Errorf("lifecycle = %+v, want preStop sleep 5", c.Lifecycle)
	}
	if v, _ := c.env("COMPLETIOND_MAX_IN_FLIGHT"); v != "256" {
		t.Errorf("extraEnv not passed: COMPLETIOND_MAX_IN_FLIGHT=%q", v)
	}
	if strings.Join(c.Args, " ") != "--log-level=DEBUG" {
		t.Errorf("args = %v", c.Args)
	}

	// The config: a ConfigMap holding the --config YAML, mounted read-only.
	if v, _ := c.env("COMPLETIOND_CONFIG"); v != "/etc/completiond/config.yaml" {
		t.Errorf("COMPLETIOND_CONFIG = %q", v)
	}
	cm := m.named(t, "ConfigMap", "rel-completiond-config")
	var cfg struct {
		DefaultRoute string                    `yaml:"default_route"`
		Providers    map[string]map[string]any `yaml:"providers"`
		Routes       map[string]map[string]any `yaml:"routes"`
		Auth         struct {
			Keys []map[string]any `yaml:"keys"`
		} `yaml:"auth"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	if cfg.DefaultRoute != "claude" || cfg.Providers["anthropic"]["api_key"] != "${ANTHROPIC_API_KEY}" || len(cfg.Routes) != 2 || len(cfg.Auth.Keys) != 1 {
		t.Errorf("config.yaml = %+v", cfg)
	}
	if d.Template.Metadata.Annotations["checksum/config"] == "" || d.Template.Metadata.Annotations["checksum/providers"] == "" {
		t.Errorf("pod annotations %v: a changed config or key would not roll the pods", d.Template.Metadata.Annotations)
	}

	// Provider keys: a Secret, every key an environment variable.
	prov := m.named(t, "Secret", "rel-completiond-providers")
	if prov.StringData["ANTHROPIC_API_KEY"] != "sk-ant-test" || prov.StringData["OPS_KEY"] != "ops-test-key" {
		t.Errorf("provider Secret = %v", prov.StringData)
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != "rel-completiond-providers" {
		t.Errorf("envFrom = %+v", c.EnvFrom)
	}
	if key := m.named(t, "Secret", "rel-completiond-api-key"); key.Data["api-key"] != "dGVzdC1rZXk=" {
		t.Errorf("api-key = %q, want base64 of test-key", key.Data["api-key"])
	}

	hpa := decodeSpec[struct {
		ScaleTargetRef struct{ Kind, Name string } `yaml:"scaleTargetRef"`
		MinReplicas    int                         `yaml:"minReplicas"`
		MaxReplicas    int                         `yaml:"maxReplicas"`
		Metrics        []any                       `yaml:"metrics"`
	}](t, m.get(t, "HorizontalPodAutoscaler"))
	if hpa.ScaleTargetRef.Kind != "Deployment" || hpa.ScaleTargetRef.Name != "rel-completiond" || hpa.MinReplicas != 2 || hpa.MaxReplicas != 10 || len(hpa.Metrics) != 2 {
		t.Errorf("HorizontalPodAutoscaler = %+v", hpa)
	}
	sm := m.get(t, "ServiceMonitor")
	smSpec := decodeSpec[struct {
		Endpoints []struct{ Port, Path string } `yaml:"endpoints"`
	}](t, sm)
	if len(smSpec.Endpoints) != 1 || smSpec.Endpoints[0].Port != "metrics" || smSpec.Endpoints[0].Path != "/metrics" || sm.Metadata.Labels["release"] != "prometheus" {
		t.Errorf("ServiceMonitor = %+v %v", smSpec, sm.Metadata.Labels)
	}
	pdb := decodeSpec[map[string]any](t, m.get(t, "PodDisruptionBudget"))
	if pdb["minAvailable"] != 1 || pdb["maxUnavailable"] != nil {
		t.Errorf("PodDisruptionBudget = %v, want minAvailable 1 only", pdb)
	}
}

func TestVariants(t *testing.T) {
	t.Run("existing secrets", func(t *testing.T) {
		m := render(t, "--set", "auth.apiKey.existingSecret=callers,auth.apiKey.existingSecretKey=token,providerKeys.existingSecret=upstreams,existingConfigMap=mycfg,existingConfigMapKey=completiond.yaml")
		d, c := deployment(t, m)
		checkSafe(t, d, c)
		if n := m.count("Secret") + m.count("ConfigMap"); n != 0 {
			t.Errorf("%d Secrets and ConfigMaps created next to existing ones", n)
		}
		var key, cfg bool
		for _, v := range d.Template.Spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == "callers" && len(v.Secret.Items) == 1 && v.Secret.Items[0].Key == "token" && v.Secret.Items[0].Path == "api-key" {
				key = true
			}
			if v.ConfigMap != nil && v.ConfigMap.Name == "mycfg" && len(v.ConfigMap.Items) == 1 && v.ConfigMap.Items[0].Key == "completiond.yaml" {
				cfg = true
			}
		}
		if !key || !cfg {
			t.Errorf("volumes %+v: want the existing key Secret and ConfigMap", d.Template.Spec.Volumes)
		}
		if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef.Name != "upstreams" {
			t.Errorf("envFrom = %+v", c.EnvFrom)
		}
	})
	t.Run("insecure, no metrics, headless", func(t *testing.T) {
		m := render(t, "--set", "auth.apiKey.generate=false,auth.insecureNoAuth=true,metrics.enabled=false,service.headless=true,podDisruptionBudget.enabled=false")
		d, c := deployment(t, m)
		checkSafe(t, d, c)
		checkService(t, m, false)
		if v, _ := c.env("COMPLETIOND_INSECURE_NO_AUTH"); v != "true" {
			t.Errorf("COMPLETIOND_INSECURE_NO_AUTH = %q", v)
		}
		if _, ok := c.env("COMPLETIOND_API_KEY_FILE"); ok || len(d.Template.Spec.Volumes) != 0 || m.count("Secret") != 0 {
			t.Error("an API key without auth")
		}
		if _, ok := c.env("COMPLETIOND_METRICS_ADDR"); ok || c.port("metrics") != 0 {
			t.Error("metrics with metrics.enabled=false")
		}
		if s := decodeSpec[serviceSpec](t, m.get(t, "Service")); s.ClusterIP != "None" {
			t.Errorf("clusterIP = %q, want None", s.ClusterIP)
		}
		if m.count("PodDisruptionBudget") != 0 {
			t.Error("PodDisruptionBudget with podDisruptionBudget.enabled=false")
		}
	})
	t.Run("config from a file", func(t *testing.T) {
		file := filepath.Join("..", "..", "examples", "config", "anthropic.yaml")
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m := render(t, "--set-file", "config="+file)
		if got := m.named(t, "ConfigMap", "rel-completiond-config").Data["config.yaml"]; strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
			t.Errorf("config.yaml is not the file:\n%s", got)
		}
		// A file with auth.keys is authentication enough.
		render(t, "--set", "auth.apiKey.generate=false", "--set-string", "config=auth:\n  keys: []\n")
	})
	t.Run("auth from the config only", func(t *testing.T) {
		m := render(t, "--set", "auth.apiKey.generate=false,config.auth.keys[0].name=ops,config.auth.keys[0].key=$${OPS_KEY},config.auth.keys[0].routes=all")
		_, c := deployment(t, m)
		if _, ok := c.env("COMPLETIOND_API_KEY_FILE"); ok {
			t.Error("an API key file without one")
		}
		if _, ok := c.env("COMPLETIOND_CONFIG"); !ok {
			t.Error("no config file")
		}
	})
}

// TestRefusals: values the server would refuse, or that would cut its
// shutdown short, fail at render time with a message.
func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		set, want string
	}{
		{"auth.apiKey.generate=false", "no authentication"},
		{"auth.insecureNoAuth=true", "auth.insecureNoAuth=true with an API key"},
		{"terminationGracePeriodSeconds=13", "terminationGracePeriodSeconds (13) must exceed"},
		{"shutdown.preStopSleepSeconds=10,terminationGracePeriodSeconds=20", "must exceed shutdown.preStopSleepSeconds + drainTimeoutSeconds + shutdownGraceSeconds (23)"},
	} {
		_, err := template(t, "--set", tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: error %v, want one containing %q", tc.set, err, tc.want)
		}
	}
}

// TestImageAgrees: the chart runs the image as the image is built — the
// same user, port and listen address in both Containerfiles.
func TestImageAgrees(t *testing.T) {
	for _, f := range []string{"Containerfile", "Containerfile.local"} {
		b, err := os.ReadFile(filepath.Join("..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"\nUSER 65532:65532\n", "\nENV COMPLETIOND_ADDR=0.0.0.0:50051\n", "\nEXPOSE 50051 9464\n", "\nENTRYPOINT [\"/usr/local/bin/completiond\"]\n"} {
			if !bytes.Contains(b, []byte(want)) {
				t.Errorf("%s has no %q", f, strings.TrimSpace(want))
			}
		}
		// Only comments may name it: the image keeps authentication on.
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "INSECURE_NO_AUTH") && !strings.HasPrefix(strings.TrimSpace(line), "#") {
				t.Errorf("%s turns authentication off: %s", f, line)
			}
		}
	}
	_, c := deployment(t, render(t))
	if c.port("grpc") != 50051 || c.port("metrics") != 9464 {
		t.Errorf("chart ports %+v differ from the image's EXPOSE 50051 9464", c.Ports)
	}
}
