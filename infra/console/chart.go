package console

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"
)

// Chart is a small time chart the console draws as inline SVG: server-rendered, no script,
// presentation attributes only (the console's CSP forbids inline styles and scripts).
type Chart struct {
	// ID is the element id; Title is read by screen readers and shown as a tooltip.
	ID, Title string
	// Unit follows the largest value on the axis ("events", "s").
	Unit string
	// End is the time of the last point; Step the time between two points.
	End  time.Time
	Step time.Duration
	// Series are drawn as lines, or the first one as bars when Bars is set. Every series
	// has the same number of points, the oldest first; NaN is a gap.
	Series []Series
	Bars   bool
}

// Series is one line of a Chart.
type Series struct {
	Name   string
	Points []float64
}

// seriesColors are the lines' colors, in order (distinct in grey scale too).
var seriesColors = []string{"#1f5fa8", "#c2410c", "#15803d", "#7e22ce", "#a16207", "#0f766e"}

const (
	chartWidth, chartHeight = 640.0, 150.0
	chartLeft, chartBottom  = 56.0, 22.0
	chartTop, chartRight    = 8.0, 8.0
)

// SVG renders c. A chart with no point (or only gaps) renders a note instead.
func (c Chart) SVG() template.HTML {
	n, points := 0, 0
	top := 0.0
	for _, s := range c.Series {
		n = max(n, len(s.Points))
		for _, v := range s.Points {
			if !math.IsNaN(v) {
				top = max(top, v)
				points++
			}
		}
	}
	if points == 0 {
		return template.HTML(`<p class="chart-empty">No data yet.</p>`)
	}
	top = niceCeil(top)
	plotW, plotH := chartWidth-chartLeft-chartRight, chartHeight-chartTop-chartBottom
	x := func(i int) float64 {
		if n == 1 {
			return chartLeft + plotW/2
		}
		return chartLeft + plotW*float64(i)/float64(n-1)
	}
	y := func(v float64) float64 { return chartTop + plotH*(1-v/top) }

	var b strings.Builder
	esc := template.HTMLEscapeString
	fmt.Fprintf(&b, `<svg class="chart" id="%s" role="img" aria-label="%s" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" xmlns="http://www.w3.org/2000/svg">`,
		esc(c.ID), esc(c.Title), chartWidth, chartHeight, chartWidth, chartHeight)
	fmt.Fprintf(&b, `<title>%s</title>`, esc(c.Title))
	// Axes and the grid: zero, half and the top.
	for _, f := range []float64{0, 0.5, 1} {
		yy := y(top * f)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#d4d4d8" stroke-width="1"/>`, chartLeft, yy, chartWidth-chartRight, yy)
		label := formatValue(top * f)
		if f == 1 && c.Unit != "" {
			label += " " + c.Unit
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" font-size="10" fill="#52525b">%s</text>`, chartLeft-4, yy+3, esc(label))
	}
	start := c.End.Add(-time.Duration(n-1) * c.Step)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#52525b">%s</text>`, chartLeft, chartHeight-6, esc(start.UTC().Format("15:04")))
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" font-size="10" fill="#52525b">%s UTC</text>`, chartWidth-chartRight, chartHeight-6,
		esc(c.End.UTC().Format("15:04")))
	if c.Bars && len(c.Series) > 0 {
		w := max(plotW/float64(n)-1, 1)
		for i, v := range c.Series[0].Points {
			if math.IsNaN(v) || v <= 0 {
				continue
			}
			xx := chartLeft + plotW*float64(i)/float64(n)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %s</title></rect>`,
				xx, y(v), w, y(0)-y(v), seriesColors[0], esc(start.Add(time.Duration(i)*c.Step).UTC().Format("15:04")), esc(formatValue(v)))
		}
	} else {
		for si, s := range c.Series {
			color := seriesColors[si%len(seriesColors)]
			var pts []string
			flush := func() {
				switch len(pts) {
				case 0:
				case 1: // a point alone would draw nothing as a line
					xy := strings.Split(pts[0], ",")
					fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="2.5" fill="%s"/>`, xy[0], xy[1], color)
				default:
					fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, color, strings.Join(pts, " "))
				}
				pts = pts[:0]
			}
			for i, v := range s.Points {
				if math.IsNaN(v) {
					flush()
					continue
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
			}
			flush()
		}
	}
	b.WriteString(`</svg>`)
	if len(c.Series) > 1 || (len(c.Series) == 1 && c.Series[0].Name != "") {
		b.WriteString(`<ul class="legend">`)
		for si, s := range c.Series {
			fmt.Fprintf(&b, `<li><svg width="12" height="12" aria-hidden="true"><rect width="12" height="12" fill="%s"/></svg> %s</li>`,
				seriesColors[si%len(seriesColors)], esc(s.Name))
		}
		b.WriteString(`</ul>`)
	}
	return template.HTML(b.String()) //nolint:gosec // every text above is escaped; the rest is numbers and constants
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 when v ≤ 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// formatValue prints v briefly: integers as such, small values with two significant digits.
func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}
