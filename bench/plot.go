package main

import (
	"bufio"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The suite's charts: standalone SVG files (no script, no external style) that the docs show.

const (
	plotFont  = `font-family="system-ui, sans-serif"`
	oursColor = "#1f5fa8"
	peerColor = "#a1a1aa"
)

// writeFile writes svg to path, creating its directory.
func writeFile(path, svg string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(svg), 0o644)
}

// benchSVG draws t's lines: per line two bars, ours and the peer's, the longer one full width
// (the ratio is the figure compared), each labelled with its figure, and the line's ratio,
// target and verdict.
func benchSVG(t *table, title string) string {
	const rowH, labelW, barW = 46.0, 360.0, 420.0
	const width = labelW + barW + 250
	top := 40.0
	h := top + rowH*float64(len(t.lines)) + 30
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s">`,
		width, h, width, h, html.EscapeString(title))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/><title>%s</title>`, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="8" y="20" %s fill="#27272a" font-size="14" font-weight="600">%s</text>`, plotFont, html.EscapeString(title))
	fmt.Fprintf(&b, `<rect x="%.0f" y="26" width="10" height="10" fill="%s"/><text x="%.0f" y="35" %s fill="#27272a" font-size="11">ours</text>`, labelW, oursColor, labelW+14, plotFont)
	fmt.Fprintf(&b, `<rect x="%.0f" y="26" width="10" height="10" fill="%s"/><text x="%.0f" y="35" %s fill="#27272a" font-size="11">peer</text>`, labelW+60, peerColor, labelW+74, plotFont)
	for i, l := range t.lines {
		y := top + rowH*float64(i)
		verdict := "met"
		switch {
		case l.info:
			verdict = "reference"
		case !l.met:
			verdict = "MISSED"
		}
		fmt.Fprintf(&b, `<text x="8" y="%.1f" %s fill="#27272a" font-size="11">%s</text>`, y+15, plotFont, html.EscapeString(clip(l.measure, 58)))
		fmt.Fprintf(&b, `<text x="8" y="%.1f" %s font-size="11" fill="#52525b">%.2f× (target %s) %s</text>`, y+31, plotFont, l.ratio,
			html.EscapeString(l.target), verdict)
		ours, peer := 1.0, 1.0
		if l.ratio > 0 && !math.IsInf(l.ratio, 0) && !math.IsNaN(l.ratio) {
			ours = l.ratio
		}
		scale := barW / max(ours, peer)
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.1f" width="%.1f" height="14" fill="%s"/>`, labelW, y+4, ours*scale, oursColor)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" %s fill="#27272a" font-size="11">%s</text>`, labelW+ours*scale+4, y+15, plotFont, html.EscapeString(l.ours))
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.1f" width="%.1f" height="14" fill="%s"/>`, labelW, y+20, peer*scale, peerColor)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" %s fill="#27272a" font-size="11">%s: %s</text>`, labelW+peer*scale+4, y+31, plotFont,
			html.EscapeString(l.peer), html.EscapeString(l.peerFig))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// soakMinute is one minute of the soak as its line reports it.
type soakMinute struct {
	minute  int
	held    bool
	claim99 float64 // ms; NaN: no claim
	walB    float64 // WAL bytes per event
	redisMB float64
}

// parseSoak reads the soak's minute lines from its printed output (make soak's stdout):
// after the header that starts with "min", each line whose first field is a number. The
// columns are read from the left up to WAL B/event and from the right for redis MB, so the
// own-WAL columns may be empty.
func parseSoak(r io.Reader) ([]soakMinute, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var out []soakMinute
	inTable := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 2 && f[0] == "min" && f[1] == "held" {
			inTable = true
			continue
		}
		if !inTable || len(f) < 18 {
			continue
		}
		m, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		x := soakMinute{minute: m, held: f[1] == "yes", claim99: math.NaN()}
		if v, err := strconv.ParseFloat(strings.TrimSuffix(f[5], "ms"), 64); err == nil {
			x.claim99 = v
		}
		if x.walB, err = strconv.ParseFloat(f[10], 64); err != nil {
			return nil, fmt.Errorf("soak line %d: WAL B/event %q: %w", m, f[10], err)
		}
		if x.redisMB, err = strconv.ParseFloat(f[len(f)-7], 64); err != nil {
			return nil, fmt.Errorf("soak line %d: redis MB %q: %w", m, f[len(f)-7], err)
		}
		out = append(out, x)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no soak minute line found (the table after the line that starts with \"min held\")")
	}
	return out, nil
}

// soakSVG draws three panels over the soak's minutes (claim p99, WAL per event, Redis
// memory), the minutes of the held transaction shaded.
func soakSVG(ms []soakMinute, title string) string {
	const width, panelH, left, right, gap = 760.0, 150.0, 64.0, 16.0, 34.0
	top := 50.0
	h := top + 3*(panelH+gap) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s">`,
		width, h, width, h, html.EscapeString(title))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/><title>%s</title>`, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="8" y="20" %s fill="#27272a" font-size="14" font-weight="600">%s</text>`, plotFont, html.EscapeString(title))
	first, last := ms[0].minute, ms[len(ms)-1].minute
	span := float64(max(last-first, 1))
	plotW := width - left - right
	// A minute's point sits at its end; the held band covers the held minutes.
	x := func(m float64) float64 { return left + plotW*(m-float64(first))/span }
	panels := []struct {
		name, unit string
		get        func(soakMinute) float64
	}{
		{"claim p99", "ms", func(s soakMinute) float64 { return s.claim99 }},
		{"WAL per event", "B", func(s soakMinute) float64 { return s.walB }},
		{"Redis memory of the soak's keys", "MB", func(s soakMinute) float64 { return s.redisMB }},
	}
	for pi, p := range panels {
		y0 := top + float64(pi)*(panelH+gap) + 16
		topV := 0.0
		for _, s := range ms {
			if v := p.get(s); !math.IsNaN(v) {
				topV = max(topV, v)
			}
		}
		topV = niceCeil(topV)
		y := func(v float64) float64 { return y0 + panelH*(1-v/topV) }
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" %s fill="#27272a" font-size="11" font-weight="600">%s</text>`, left, y0-4, plotFont, html.EscapeString(p.name))
		for _, s := range ms {
			if s.held {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#fde68a" opacity="0.6"/>`,
					x(float64(s.minute)-1), y0, x(float64(s.minute))-x(float64(s.minute)-1), panelH)
			}
		}
		for _, f := range []float64{0, 0.5, 1} {
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#d4d4d8"/>`, left, y(topV*f), width-right, y(topV*f))
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end" %s fill="#27272a" font-size="11">%s %s</text>`, left-4, y(topV*f)+4, plotFont,
				strconv.FormatFloat(topV*f, 'f', -1, 64), p.unit)
		}
		var pts []string
		for _, s := range ms {
			if v := p.get(s); !math.IsNaN(v) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(s.minute)), y(v)))
			}
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`, oursColor, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" %s fill="#27272a" font-size="11">minute %d</text>`, left, y0+panelH+14, plotFont, first)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end" %s fill="#27272a" font-size="11">minute %d</text>`, width-right, y0+panelH+14, plotFont, last)
	}
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.1f" width="10" height="10" fill="#fde68a"/><text x="%.0f" y="%.1f" %s fill="#27272a" font-size="11">REPEATABLE READ transaction held open</text>`,
		8.0, 28.0, 22.0, 37.0, plotFont)
	b.WriteString(`</svg>`)
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 when v ≤ 0).
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) {
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

// plotSoak renders the soak output in logPath as an SVG at svgPath (title empty: one naming
// the file).
func plotSoak(logPath, svgPath, title string) error {
	f, err := os.Open(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	ms, err := parseSoak(f)
	if err != nil {
		return fmt.Errorf("%s: %w", logPath, err)
	}
	if title == "" {
		title = fmt.Sprintf("make soak, %d minutes (%s)", len(ms), filepath.Base(logPath))
	}
	if err := writeFile(svgPath, soakSVG(ms, title)); err != nil {
		return err
	}
	fmt.Printf("soak plot: %d minutes of %s → %s\n", len(ms), logPath, svgPath)
	return nil
}

// parseBenchTable reads the last table the suite printed (make bench's stdout, or a copy of
// its table in a document): the lines after a header that starts with "measure", up to the
// first line that is not a row. Columns are separated by two spaces or more.
func parseBenchTable(r io.Reader) (*table, error) {
	sc := bufio.NewScanner(r)
	var t *table
	in := false
	for sc.Scan() {
		cols := splitColumns(strings.TrimRight(sc.Text(), " "))
		if len(cols) >= 6 && cols[0] == "measure" && cols[1] == "ours" {
			t, in = &table{}, true
			continue
		}
		if !in {
			continue
		}
		if len(cols) != 7 {
			in = false
			continue
		}
		ratio, err := strconv.ParseFloat(strings.TrimSuffix(cols[4], "×"), 64)
		if err != nil {
			return nil, fmt.Errorf("bench table: ratio %q: %w", cols[4], err)
		}
		t.lines = append(t.lines, line{measure: cols[0], ours: cols[1], peer: cols[2], peerFig: cols[3], ratio: ratio,
			target: cols[5], met: cols[6] == "met", info: cols[6] == "-"})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if t == nil || len(t.lines) == 0 {
		return nil, errors.New("no bench table found (a header that starts with \"measure  ours\")")
	}
	return t, nil
}

// splitColumns splits a tabwriter line at runs of two spaces or more.
func splitColumns(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, "  ") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// plotBench renders the last bench table in logPath as an SVG at svgPath.
func plotBench(logPath, svgPath, title string) error {
	f, err := os.Open(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	t, err := parseBenchTable(f)
	if err != nil {
		return fmt.Errorf("%s: %w", logPath, err)
	}
	if title == "" {
		title = "make bench (" + filepath.Base(logPath) + ")"
	}
	if err := writeFile(svgPath, benchSVG(t, title)); err != nil {
		return err
	}
	fmt.Printf("bench plot: %d lines of %s → %s\n", len(t.lines), logPath, svgPath)
	return nil
}
