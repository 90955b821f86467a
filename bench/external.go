package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
)

// benchBullMQ runs infra/bullmq/cmd/bullmqbench (Go publisher and worker vs Node.js BullMQ,
// o.n jobs each) and reads its two ratio lines.
func benchBullMQ(ctx context.Context, o options, t *table) error {
	out, err := runIn(ctx, o.root, "go", "run", "./infra/bullmq/cmd/bullmqbench", "-n", strconv.Itoa(o.n), "-redis", o.redisURL)
	if err != nil {
		return err
	}
	for _, m := range []struct {
		re, measure, peer, target string
		min                       float64
	}{
		{`add:\s+Go publisher\s+([\d.]+) jobs/s\s+Node.js addBulk\s+([\d.]+) jobs/s`, "Go BullMQ publisher vs Node addBulk", "Node addBulk", "≥ 2×", 2},
		{`drain: Go worker\s+([\d.]+) jobs/s\s+Node.js Worker\s+([\d.]+) jobs/s`, "Go BullMQ worker vs Node Worker", "Node Worker", "≥ 1.5×", 1.5},
	} {
		f := regexp.MustCompile(m.re).FindSubmatch(out)
		if f == nil {
			return fmt.Errorf("bullmqbench: no %q line in its output", m.measure)
		}
		a, _ := strconv.ParseFloat(string(f[1]), 64)
		b, _ := strconv.ParseFloat(string(f[2]), 64)
		t.add(line{measure: m.measure, ours: perSec(a, "jobs"), peer: m.peer, peerFig: perSec(b, "jobs"), ratio: a / b, target: m.target, met: a/b >= m.min})
	}
	return nil
}

// benchIdem runs internal/idembench (POST /stores over HTTP, 32 clients) and infra/idem's
// BenchmarkIdempotentWrite (the bus, a one-row handler, 32 clients) and reads their ratios.
func benchIdem(ctx context.Context, o options, t *table) error {
	// A failure of the HTTP half (idembench's own check) is reported after the bus half has
	// run: the two measure different things.
	httpErr := benchIdemHTTP(ctx, o, t)

	out, err := runIn(ctx, o.root, "go", "test", "-run", "^$", "-count=1", "-bench", "BenchmarkIdempotentWrite", "-benchtime", "100x", "./infra/idem")
	if err != nil {
		return err
	}
	bl := regexp.MustCompile(`baseline \(no idempotency\)\s+p50\s+([\d.]+) ms\s+p99\s+([\d.]+) ms`).FindAllSubmatch(out, -1)
	fl := regexp.MustCompile(`idempotent first execution\s+p50\s+([\d.]+) ms\s+p99\s+([\d.]+) ms`).FindAllSubmatch(out, -1)
	if bl == nil || fl == nil {
		return fmt.Errorf("BenchmarkIdempotentWrite: no p50/p99 lines in its output")
	}
	// The benchmark runs once with b.N = 1 and once with b.N = 100: the last lines count.
	// Targets: p50 ≤ 1.3× (issue 47), p99 ≤ 1.5× (issue 13).
	bs, fs := bl[len(bl)-1], fl[len(fl)-1]
	for i, q := range []string{"p50", "p99"} {
		b, _ := strconv.ParseFloat(string(bs[i+1]), 64)
		f, _ := strconv.ParseFloat(string(fs[i+1]), 64)
		bound := []float64{1.3, 1.5}[i]
		t.add(line{measure: "idempotent first execution vs without, bus, one-row handler, " + q, ours: fmt.Sprintf("%.2f ms", f),
			peer: "no middleware", peerFig: fmt.Sprintf("%.2f ms", b), ratio: f / b, target: fmt.Sprintf("≤ %.2f×", bound), met: f/b <= bound})
	}
	return httpErr
}

// benchIdemHTTP runs internal/idembench (POST /stores over HTTP, 32 clients) and reads its p50 ratio.
func benchIdemHTTP(ctx context.Context, o options, t *table) error {
	out, err := runIn(ctx, o.root, "go", "run", "./internal/idembench", "-rounds", "4")
	if err != nil {
		return err
	}
	base := regexp.MustCompile(`baseline \(no idempotency middleware\)\s+n=\d+\s+p50\s+([\d.]+)ms`).FindSubmatch(out)
	first := regexp.MustCompile(`idempotent, first execution\s+n=\d+\s+p50\s+([\d.]+)ms`).FindSubmatch(out)
	if base == nil || first == nil {
		return fmt.Errorf("idembench: no p50 lines in its output")
	}
	b, _ := strconv.ParseFloat(string(base[1]), 64)
	f, _ := strconv.ParseFloat(string(first[1]), 64)
	t.add(line{measure: "idempotent first execution vs without, HTTP, p50", ours: fmt.Sprintf("%.2f ms", f), peer: "no middleware",
		peerFig: fmt.Sprintf("%.2f ms", b), ratio: f / b, target: "≤ 1.15×", met: f/b <= 1.15})
	return nil
}

// runIn runs a command in dir, echoing its output, and returns the output.
func runIn(ctx context.Context, dir string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var buf bytes.Buffer
	cmd.Stdout = io.MultiWriter(&buf, prefixed(os.Stdout))
	cmd.Stderr = prefixed(os.Stderr)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %v: %w", name, args, err)
	}
	return buf.Bytes(), nil
}

// prefixed indents a child's output under the section it belongs to.
func prefixed(w io.Writer) io.Writer { return &indent{w: w, bol: true} }

type indent struct {
	w   io.Writer
	bol bool
}

func (i *indent) Write(p []byte) (int, error) {
	for _, c := range p {
		if i.bol {
			if _, err := i.w.Write([]byte("   | ")); err != nil {
				return 0, err
			}
		}
		if _, err := i.w.Write([]byte{c}); err != nil {
			return 0, err
		}
		i.bol = c == '\n'
	}
	return len(p), nil
}
