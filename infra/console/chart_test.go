package console

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestChartSVG(t *testing.T) {
	end := time.Date(2026, 12, 5, 10, 30, 0, 0, time.UTC)
	c := Chart{ID: "c", Title: `<script>alert(1)</script>`, Unit: "s", End: end, Step: time.Minute,
		Series: []Series{{Name: "p50", Points: []float64{1, 2, math.NaN(), 3}}, {Name: "p99 & more", Points: []float64{4, 7, 8, 9}}}}
	svg := string(c.SVG())
	require.NotContains(t, svg, "<script>", "the title is escaped")
	require.Contains(t, svg, "&lt;script&gt;")
	require.Equal(t, 2, strings.Count(svg, "<polyline"), "p50 broken at its gap, p99 whole")
	require.Equal(t, 1, strings.Count(svg, "<circle"), "p50's point after the gap, alone, a dot")
	require.Contains(t, svg, ">10 s</text>", "the axis tops at a round value above 9")
	require.Contains(t, svg, ">10:27</text>", "the first point's time")
	require.Contains(t, svg, ">10:30 UTC</text>")
	require.Contains(t, svg, "p99 &amp; more")

	bars := string(Chart{ID: "b", End: end, Step: time.Minute, Series: []Series{{Points: []float64{0, 5, 0}}}, Bars: true}.SVG())
	require.Equal(t, 1, strings.Count(bars, "<rect x="), "one bar: zeros draw nothing")
	require.NotContains(t, bars, `class="legend"`, "one unnamed series has no legend")

	require.Contains(t, string(Chart{}.SVG()), "No data yet.")
	require.Contains(t, string(Chart{Series: []Series{{Points: []float64{math.NaN(), math.NaN()}}}}.SVG()), "No data yet.", "only gaps")
}

func TestNiceCeil(t *testing.T) {
	for v, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 1.1: 2, 3: 5, 7: 10, 120: 200, 999: 1000} {
		require.InDelta(t, want, niceCeil(v), 1e-9, "%v", v)
	}
}
