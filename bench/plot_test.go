package main

import (
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
)

// Two minutes of make soak's output as it prints them, the second without the own-WAL
// columns (no pg_walinspect) and its claim not measured.
const soakOutput = `soak: 30 min, 350 events/s on average
min  held    events     jobs  claim50  claim99  live heap   live idx   dead tup        log  WAL B/event   own B/ev  own FPI  ckpts   redis MB Go us/ev PG us/ev Rds us/ev vacuums  load1 failed
1    no       21090    21607    1.8ms   49.3ms       2.3M       1.6M       2044       9.8M         8648       2176      107      2        8.1      614     1581      420      13  15.87 0
soak: own WAL of minute 2 not counted: no
2    yes      28123    46862        -        -       1.3M       2.0M       1507      22.3M         8602                           0        9.9      516     1217      373      26  17.38 0
soak: 49213 events committed`

func TestParseSoak(t *testing.T) {
	ms, err := parseSoak(strings.NewReader(soakOutput))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("minutes: %d, want 2", len(ms))
	}
	a, b := ms[0], ms[1]
	if a.minute != 1 || a.held || a.claim99 != 49.3 || a.walB != 8648 || a.redisMB != 8.1 {
		t.Errorf("minute 1: %+v", a)
	}
	if b.minute != 2 || !b.held || !math.IsNaN(b.claim99) || b.walB != 8602 || b.redisMB != 9.9 {
		t.Errorf("minute 2: %+v", b)
	}
	svg := soakSVG(ms, "t")
	if !strings.HasPrefix(svg, "<svg ") || strings.Count(svg, "<polyline") != 3 || !strings.Contains(svg, `fill="#fde68a" opacity`) {
		t.Errorf("soak chart: three lines and the held minute shaded:\n%s", svg)
	}
	if _, err := parseSoak(strings.NewReader("bench: nothing")); err == nil {
		t.Error("an output without the table parsed")
	}
}

func TestBenchSVG(t *testing.T) {
	tb := &table{lines: []line{
		{measure: "drain <1 workspace>", ours: "100 events/s", peer: "Node", peerFig: "50 jobs/s", ratio: 2, target: "≥ 1.30×", met: true},
		{measure: "latency", ours: "9 ms", peer: "wm", peerFig: "10 ms", ratio: 0.9, target: "≤ 1×", met: true},
	}}
	svg := benchSVG(tb, "bench & co")
	for _, want := range []string{"drain &lt;1 workspace&gt;", "bench &amp; co", "2.00× (target ≥ 1.30×) met", "Node: 50 jobs/s", `width="420.0"`} {
		if !strings.Contains(svg, want) {
			t.Errorf("bench chart lacks %q:\n%s", want, svg)
		}
	}
}

func TestParseBenchTable(t *testing.T) {
	out := "bench done\n\nmeasure                                 ours            peer        peer figure     ratio   target     \n" +
		"drain, 1 workspace vs Node addBulk      25317 events/s  Node addBulk  16054 jobs/s  1.58×   ≥ 1.30×    met\n" +
		"write path, 8 clients: NOTIFY trigger (sql/003) vs none  2205 commits/s  no wake-up  3080 commits/s  0.72×  reference  -\n" +
		"end to end, 100000 committed commands → jobs done  533 jobs/s  River v0.51.2  10990 jobs/s  0.05×  ≥ 0.75×  MISSED\n```\n"
	tb, err := parseBenchTable(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(tb.lines) != 3 {
		t.Fatalf("lines: %d, want 3", len(tb.lines))
	}
	if l := tb.lines[0]; l.measure != "drain, 1 workspace vs Node addBulk" || l.ours != "25317 events/s" || l.peerFig != "16054 jobs/s" ||
		l.ratio != 1.58 || l.target != "≥ 1.30×" || !l.met || l.info {
		t.Errorf("line 1: %+v", l)
	}
	if l := tb.lines[1]; !l.info || l.ratio != 0.72 {
		t.Errorf("line 2: %+v", l)
	}
	if l := tb.lines[2]; l.met || l.info || l.peer != "River v0.51.2" {
		t.Errorf("line 3: %+v", l)
	}
}

// wellFormed fails t unless svg parses as XML with no attribute given twice in one element
// (browsers refuse such a document; encoding/xml does not notice).
func wellFormed(t *testing.T, svg string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("not XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			seen := map[string]bool{}
			for _, a := range se.Attr {
				if seen[a.Name.Local] {
					t.Fatalf("<%s> has %s twice", se.Name.Local, a.Name.Local)
				}
				seen[a.Name.Local] = true
			}
		}
	}
}

func TestChartsAreWellFormed(t *testing.T) {
	ms, err := parseSoak(strings.NewReader(soakOutput))
	if err != nil {
		t.Fatal(err)
	}
	wellFormed(t, soakSVG(ms, "soak & co"))
	wellFormed(t, benchSVG(&table{lines: []line{{measure: "a <b>", ours: "1", peer: "p", peerFig: "2", ratio: 0.5, target: "≥ 1×"}}}, "t"))
}
