package tests

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/VictoriaMetrics/metricsql"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// grafanaVariables stand in for the dashboard's template variables when its queries are
// parsed: every variable as "all values".
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$queue", ".*", "$job", ".*")

// TestDashboardAndAlertsUseServedMetrics: every query of deploy/grafana/listing.json and every
// rule of deploy/prometheus/alerts.yml parses, and every series it selects is served by a
// freshly started service (`app all`, which runs every component) before any work was done:
// a series created only on first use would be missing from a dashboard and would hide its
// first increase from an alert.
func TestDashboardAndAlertsUseServedMetrics(t *testing.T) {
	t.Parallel()
	served := servedSeries(t)

	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "listing.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &dash))
	queries := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, target := range p.Targets {
			requireServed(t, served, "panel "+p.Title, grafanaVariables.Replace(target.Expr))
			queries++
		}
	}
	require.GreaterOrEqual(t, queries, 20, "the dashboard's queries")

	var rules struct {
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
	raw, err = os.ReadFile(filepath.Join("..", "deploy", "prometheus", "alerts.yml"))
	require.NoError(t, err)
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&rules))
	// The template functions Prometheus gives annotations, as stubs: the test checks that
	// each annotation parses, not what it prints.
	funcs := template.FuncMap{}
	for _, name := range []string{"humanize", "humanizeDuration", "humanizePercentage", "humanizeTimestamp"} {
		funcs[name] = func(any) string { return "" }
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		require.NotEmpty(t, g.Name)
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "group %s: a rule without a name", g.Name)
			require.False(t, alerts[r.Alert], "alert %s declared twice", r.Alert)
			alerts[r.Alert] = true
			if r.For != "" {
				_, err := time.ParseDuration(r.For)
				require.NoError(t, err, "alert %s: for", r.Alert)
			}
			require.Contains(t, []string{"page", "ticket"}, r.Labels["severity"], "alert %s: severity", r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], "alert %s: summary", r.Alert)
			for k, text := range r.Annotations {
				// Prometheus defines these variables before an annotation's text.
				defs := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}"
				_, err := template.New(k).Funcs(funcs).Parse(defs + text)
				require.NoError(t, err, "alert %s: annotation %s", r.Alert, k)
			}
			requireServed(t, served, "alert "+r.Alert, r.Expr)
		}
	}
	for _, name := range []string{"ListingOutboxOwedTooLong", "ListingJobsFailing", "ListingReconcilerExhausted", "ListingQueueWaitHigh"} {
		require.True(t, alerts[name], "alert %s", name)
	}
}

// servedSeries starts `app all` on a database and Redis prefix of its own, scrapes its
// /metrics twice (as Prometheus would: the first scrape counts itself in the HTTP metrics)
// and returns every series it serves, as maps of labels with __name__.
func servedSeries(t *testing.T) []map[string]string {
	t.Helper()
	db := pgtest.New(t)
	prefix := seedPrefix()
	seedRedis(t, prefix)
	api := seedFreeAddr(t)
	env := seedEnv(db.AppURL, prefix, map[string]string{"HTTP_ADDR": api,
		"SANDBOX_MARKETPLACE_ADDR": seedFreeAddr(t), "SANDBOX_AI_ADDR": seedFreeAddr(t)})
	p := seedStartProc(t, "all", env, "all")
	seedWaitHTTP(t, p, "http://"+api+"/readyz")
	var body []byte
	for range 2 {
		resp, err := http.Get("http://" + api + "/metrics")
		require.NoError(t, err)
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	sample := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)
	label := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	var series []map[string]string
	for _, line := range strings.Split(string(body), "\n") {
		m := sample.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := map[string]string{"__name__": m[1]}
		for _, l := range label.FindAllStringSubmatch(m[2], -1) {
			s[l[1]] = l[2]
		}
		series = append(series, s)
	}
	require.NotEmpty(t, series)
	return series
}

// requireServed parses expr as PromQL and requires, for every selector in it, a served series
// that the selector matches.
func requireServed(t *testing.T, served []map[string]string, where, expr string) {
	t.Helper()
	parsed, err := metricsql.Parse(expr)
	require.NoError(t, err, "%s: %s", where, expr)
	requirePromQL(t, where, expr, parsed)
	selectors := 0
	metricsql.VisitAll(parsed, func(e metricsql.Expr) {
		me, ok := e.(*metricsql.MetricExpr)
		if !ok || me.IsEmpty() {
			return
		}
		selectors++
		for _, filters := range me.LabelFilterss {
			require.True(t, matchesAny(t, served, filters), "%s: no served series matches %s (in %s)",
				where, string(me.AppendString(nil)), expr)
		}
	})
	require.Positive(t, selectors, "%s: %s selects no metric", where, expr)
}

// PromQL's functions of a range vector, its other functions and its aggregation operators.
// metricsql parses a superset of PromQL (MetricsQL): a function of its own, or `rate(x)`
// without a window, parses there and fails in Prometheus.
var (
	promQLRangeFunctions = strings.Fields(`rate irate increase delta idelta deriv predict_linear
		holt_winters double_exponential_smoothing resets changes avg_over_time min_over_time
		max_over_time sum_over_time count_over_time quantile_over_time stddev_over_time
		stdvar_over_time last_over_time present_over_time absent_over_time mad_over_time`)
	promQLFunctions = strings.Fields(`abs absent ceil clamp clamp_max clamp_min day_of_month
		day_of_week day_of_year days_in_month exp floor histogram_quantile histogram_count
		histogram_sum histogram_fraction histogram_avg hour label_join label_replace ln log2
		log10 minute month round scalar sgn sort sort_desc sqrt time timestamp vector year`)
	promQLAggregations = strings.Fields(`sum min max avg group stddev stdvar count count_values
		bottomk topk quantile limitk limit_ratio`)
	metricsQLWith = regexp.MustCompile(`(?i)\bwith\s*\(`)
)

// requirePromQL requires expr, parsed by metricsql, to be PromQL: its functions and
// aggregations are PromQL's, each range function has a range selector with its window, and
// it uses no WITH template.
func requirePromQL(t *testing.T, where, expr string, parsed metricsql.Expr) {
	t.Helper()
	require.NotRegexp(t, metricsQLWith, expr, "%s: WITH is MetricsQL, not PromQL", where)
	metricsql.VisitAll(parsed, func(e metricsql.Expr) {
		switch e := e.(type) {
		case *metricsql.FuncExpr:
			ranged := slices.Contains(promQLRangeFunctions, e.Name)
			require.True(t, ranged || slices.Contains(promQLFunctions, e.Name), "%s: %s is not a PromQL function (in %s)",
				where, e.Name, expr)
			if ranged {
				require.True(t, slices.ContainsFunc(e.Args, func(a metricsql.Expr) bool {
					r, ok := a.(*metricsql.RollupExpr)
					return ok && r.Window != nil
				}), "%s: %s needs a range selector with its window, as x[5m] (in %s)", where, e.Name, expr)
			}
			require.False(t, e.KeepMetricNames, "%s: keep_metric_names is MetricsQL (in %s)", where, expr)
		case *metricsql.AggrFuncExpr:
			require.True(t, slices.Contains(promQLAggregations, e.Name), "%s: %s is not a PromQL aggregation (in %s)", where, e.Name, expr)
		}
	})
}

func matchesAny(t *testing.T, served []map[string]string, filters []metricsql.LabelFilter) bool {
	for _, s := range served {
		ok := true
		for _, f := range filters {
			// Labels Prometheus adds when it scrapes are not on /metrics.
			if f.Label == "job" || f.Label == "instance" {
				continue
			}
			match := s[f.Label] == f.Value
			if f.IsRegexp {
				re, err := regexp.Compile("^(?:" + f.Value + ")$")
				require.NoError(t, err)
				match = re.MatchString(s[f.Label])
			}
			if match == f.IsNegative {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
