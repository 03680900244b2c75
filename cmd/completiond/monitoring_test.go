package main

import (
	"crypto/tls"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/credentials"

	"github.com/completiond/completiond/internal/redistest"
)

// The monitoring files the repository ships, relative to this package.
const (
	alertsFile    = "../../deploy/prometheus/alerts.yaml"
	dashboardFile = "../../deploy/grafana/completiond.json"
)

// ruleFile is a Prometheus rule file, as far as the checks need it.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// dashboard is a Grafana dashboard, as far as the checks need it.
type dashboard struct {
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		Expr     string `json:"expr"`
		Exemplar bool   `json:"exemplar"`
	} `json:"targets"`
}

// TestAlertsAndDashboardUseServedMetrics parses the shipped alert rules and
// dashboard, and checks every expression against what a running server's
// /metrics serves after a completion with a retry: a metric renamed in the
// code and not in the rules fails here, not in a silent alert.
func TestAlertsAndDashboardUseServedMetrics(t *testing.T) {
	served := servedMetrics(t)

	rules := readRules(t)
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if r.Alert == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %q: needs alert, labels.severity and annotations.summary", r.Alert)
			}
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("rule %q: for %q: %v", r.Alert, r.For, err)
			}
			checkExpr(t, "alert "+r.Alert, r.Expr, served)
		}
	}
	for _, want := range []string{"CompletiondCircuitOpen", "CompletiondHighFallbackRate", "CompletiondHighErrorRate", "CompletiondSlowFirstChunk", "CompletiondRedisDegraded", "CompletiondCertificateExpiresSoon"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s; have %v", want, alerts)
		}
	}

	d := readDashboard(t)
	n, exemplars := 0, 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				n++
				if tg.Exemplar {
					exemplars++
				}
				checkExpr(t, "panel "+p.Title, tg.Expr, served)
			}
		}
	}
	walk(d.Panels)
	if n == 0 || exemplars == 0 {
		t.Errorf("dashboard has %d queries, %d with exemplars; want some of each", n, exemplars)
	}
	for _, v := range d.Templating.List {
		for _, m := range regexp.MustCompile(`label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*)`).FindAllStringSubmatch(v.Definition, -1) {
			if !served[m[1]] {
				t.Errorf("variable %s: metric %s is not served", v.Name, m[1])
			}
		}
	}
}

// checkExpr checks that expr names at least one metric and only served ones.
func checkExpr(t *testing.T, where, expr string, served map[string]bool) {
	t.Helper()
	if strings.Count(expr, "(") != strings.Count(expr, ")") || strings.Count(expr, "{") != strings.Count(expr, "}") ||
		strings.Count(expr, "[") != strings.Count(expr, "]") {
		t.Errorf("%s: unbalanced brackets in %q", where, expr)
	}
	names := metricNames(expr)
	if len(names) == 0 {
		t.Errorf("%s: no metric in %q", where, expr)
	}
	for _, name := range names {
		if !served[name] {
			t.Errorf("%s: metric %s is not on /metrics", where, name)
		}
	}
}

// promqlWords are the PromQL keywords that are not followed by "(".
var promqlWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
	"group_right": true, "bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true}

var (
	quoted     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	braced     = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	grouping   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	identifier = regexp.MustCompile(`\b[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
)

// metricNames returns the metric names in a PromQL expression: the
// identifiers left once strings, label matchers, ranges and grouping
// labels are removed, that are neither functions nor keywords.
func metricNames(expr string) []string {
	s := quoted.ReplaceAllString(expr, `""`)
	s = braced.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	var out []string
	for _, id := range identifier.FindAllString(s, -1) {
		if strings.HasSuffix(id, "(") {
			continue // a function
		}
		id = strings.TrimSpace(id)
		if !promqlWords[strings.ToLower(id)] {
			out = append(out, id)
		}
	}
	return out
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`max by (completiond_route) (completiond_circuit_state{completiond_circuit_state="open"}) == 1`, []string{"completiond_circuit_state"}},
		{`histogram_quantile(0.95, sum by (le) (rate(a_bucket{x=~"$instance"}[$__rate_interval])))`, []string{"a_bucket"}},
		{`sum(rate(a_total{r="x"}[5m])) / on (job) group_left sum(b)`, []string{"a_total", "b"}},
		{`a unless b offset 5m`, []string{"a", "b"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %v, want %v", tc.expr, got, tc.want)
		}
	}
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	if len(f.Groups) == 0 {
		t.Fatalf("%s: no rule groups", alertsFile)
	}
	return f
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" {
		t.Errorf("%s: no uid", dashboardFile)
	}
	return d
}

// servedMetrics runs the server with the Prometheus endpoint, over TLS (the
// certificate's expiry is a metric) and with a Redis (so that the fleet's
// metrics are served too), makes one completion with a retry,
// and returns the names of the series /metrics then serves (histograms as
// their _bucket, _sum and _count).
func servedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	certPEM, keyPEM, pool := localhostCert(t)
	dir := t.TempDir()
	env := map[string]string{"COMPLETIOND_TLS_CERT": filepath.Join(dir, "server.crt"), "COMPLETIOND_TLS_KEY": filepath.Join(dir, "server.key"),
		"COMPLETIOND_REDIS_URL": "redis://" + redistest.Start(t)}
	for path, b := range map[string][]byte{env["COMPLETIOND_TLS_CERT"]: certPEM, env["COMPLETIOND_TLS_KEY"]: keyPEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	metricsAddr, stop := servedWith(t, env, credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"}))
	defer stop()
	served := map[string]bool{}
	series := regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]`)
	for _, m := range series.FindAllStringSubmatch(scrape(t, "http://"+metricsAddr+"/metrics"), -1) {
		served[m[1]] = true
	}
	return served
}
