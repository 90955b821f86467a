package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// line is one row of the table: our figure, the peer's, their ratio and the target.
type line struct {
	measure string
	ours    string
	peer    string
	peerFig string
	ratio   float64
	target  string
	met     bool
	// info marks a line printed for reference, without a target.
	info bool
}

type table struct {
	lines []line
	// failed lists the sections that could not be measured, and why.
	failed []string
}

func (t *table) add(l line) {
	t.lines = append(t.lines, l)
	v := "met"
	switch {
	case l.info:
		v = "(reference)"
	case !l.met:
		v = "MISSED"
	}
	fmt.Printf("   %s: %s vs %s %s = %.2f× (target %s) %s\n", l.measure, l.ours, l.peer, l.peerFig, l.ratio, l.target, v)
}

func (t *table) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tours\tpeer\tpeer figure\tratio\ttarget\t")
	for _, l := range t.lines {
		v := "met"
		switch {
		case l.info:
			v = "-"
		case !l.met:
			v = "MISSED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f×\t%s\t%s\n", l.measure, l.ours, l.peer, l.peerFig, l.ratio, l.target, v)
	}
	_ = tw.Flush()
	for _, f := range t.failed {
		fmt.Fprintf(w, "FAILED %s\n", f)
	}
}
