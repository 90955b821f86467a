package console

import (
	"math"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/google/uuid"
)

// The overview, the console's first page: one row per flow and one for the outbox now (read
// when the page is drawn), and charts of the last hour (per minute) or day (per ten minutes)
// from the samples RunSampler writes (sql/050, sql/054).

// overviewRefresh is how often the page reloads itself (a meta refresh: no script).
const overviewRefresh = 60

// overviewRange is one of the overview's time windows.
type overviewRange struct {
	Name   string
	Label  string
	Points int
	Step   time.Duration
}

var overviewRanges = []overviewRange{
	{"hour", "The last hour, per minute", 60, time.Minute},
	{"day", "The last day, per ten minutes", 144, 10 * time.Minute},
}

// FlowNow is one flow's row on the overview.
type FlowNow struct {
	Flow string
	// Waiting and Running count the flow's tasks pending and running; Held the requests of
	// the waiting ones that fair share holds in the outbox; FailedHour the tasks failed in
	// the last hour; OldestWaiting is the oldest pending task's age (0: none).
	Waiting, Held, Running, FailedHour int64
	OldestWaiting                      time.Duration
	// QueueWaiting counts the jobs waiting in the flow's queue (nil: not read).
	QueueWaiting *int64
}

// OutboxNow is the outbox's row on the overview.
type OutboxNow struct {
	Owed       int64
	OldestOwed time.Duration
	// DeliveredPerMinute is the last sampled minute's deliveries (nil: no sample yet).
	DeliveredPerMinute *int64
}

// overviewData is the overview page.
type overviewData struct {
	Flows   []FlowNow
	Outbox  OutboxNow
	Refresh int
	// Backlogs are the workspaces with the most tasks waiting; RateWaits the platforms'
	// rate-limit waits (nil: the console has no wait log).
	Backlogs  []Backlog
	RateWaits []RateWaits
	// Flow is the flow the charts show (empty: every flow); FlowLinks and RangeLinks are
	// the choices, each with its address.
	Flow, Range, RangeLabel string
	FlowLinks, RangeLinks   []choiceLink
	Throughput, Latency     Chart
	Depth, Reconciliations  Chart
	Delivered, Owed         Chart
	// Sampled is the last sampled minute (zero: none yet).
	Sampled time.Time
	// SampleSize is sampleSize; LatencySampled and RedeliveredSampled count the flow minutes
	// charted whose percentiles, and whose redeliveries (an estimate), are from a sample of
	// that many (FlowSample.LatencySample, RedeliveredSample).
	SampleSize                         int
	LatencySampled, RedeliveredSampled int
}

// choiceLink is one link of a choice on the overview (a flow, a range).
type choiceLink struct {
	Label   string
	URL     string
	Current bool
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ctx := r.Context()
	now := s.now()
	d := overviewData{Refresh: overviewRefresh, Flow: q.Get("flow"), Range: q.Get("range")}
	p := page{Title: "Overview", Data: &d}
	ri := slices.IndexFunc(overviewRanges, func(x overviewRange) bool { return x.Name == d.Range })
	if d.Range == "" {
		ri, d.Range = 0, overviewRanges[0].Name
	}
	fi := slices.IndexFunc(s.cfg.Flows, func(f Flow) bool { return f.Name == d.Flow })
	if ri < 0 || (d.Flow != "" && fi < 0) {
		p.Error = "Bad choice: flow is one of the flows listed below, range is hour or day."
		s.render(w, r, http.StatusBadRequest, "index", p)
		return
	}
	rng := overviewRanges[ri]
	d.RangeLabel = rng.Label
	link := func(flow, rg string) string {
		v := url.Values{}
		if flow != "" {
			v.Set("flow", flow)
		}
		if rg != overviewRanges[0].Name {
			v.Set("range", rg)
		}
		if len(v) == 0 {
			return "/"
		}
		return "/?" + v.Encode()
	}
	d.FlowLinks = append(d.FlowLinks, choiceLink{"every flow", link("", d.Range), d.Flow == ""})
	for _, f := range s.cfg.Flows {
		d.FlowLinks = append(d.FlowLinks, choiceLink{f.Name, link(f.Name, d.Range), d.Flow == f.Name})
	}
	for _, x := range overviewRanges {
		d.RangeLinks = append(d.RangeLinks, choiceLink{x.Name, link(d.Flow, x.Name), x.Name == d.Range})
	}

	tasks, err := s.data.overviewTasks(ctx, now.Add(-time.Hour))
	if err != nil {
		s.fail(w, r, "overview", err)
		return
	}
	held, err := s.data.held(ctx, nil)
	if err != nil {
		s.fail(w, r, "overview", err)
		return
	}
	for _, f := range s.cfg.Flows {
		t := tasks[f.Table]
		row := FlowNow{Flow: f.Name, Waiting: t.Pending, Held: held[heldKey{uuid.Nil, f.Queue}], Running: t.Running, FailedHour: t.Failed}
		if t.OldestPendingAt != nil {
			row.OldestWaiting = now.Sub(*t.OldestPendingAt)
		}
		if s.cfg.BullMQ.Client != nil {
			if n, err := queueWaiting(ctx, s.cfg.BullMQ, f.Queue); err == nil {
				row.QueueWaiting = &n
			} else {
				s.log.Warn("console: overview: queue not read", "queue", f.Queue, "err", err)
			}
		}
		d.Flows = append(d.Flows, row)
	}
	if d.Outbox.Owed, d.Outbox.OldestOwed, err = s.data.owed(ctx, now); err != nil {
		s.fail(w, r, "overview", err)
		return
	}
	if d.Backlogs, err = s.largestBacklogs(ctx, now); err != nil {
		s.fail(w, r, "overview", err)
		return
	}
	if d.RateWaits, err = s.rateWaits(ctx, now); err != nil {
		s.log.Warn("console: overview: rate-limit waits not read", "err", err)
		d.RateWaits = nil
	}

	// The charts end at the last minute a sample can hold.
	end := now.Add(-time.Minute - sampleLag).Truncate(time.Minute)
	end = end.Truncate(rng.Step)
	from := end.Add(-time.Duration(rng.Points-1) * rng.Step)
	flowRows, err := s.data.flowSamples(ctx, from, end.Add(rng.Step))
	if err == nil {
		var out []OutboxSample
		if out, err = s.data.outboxSamples(ctx, from, end.Add(rng.Step)); err == nil {
			if len(out) > 0 {
				last := out[len(out)-1]
				d.Sampled, d.Outbox.DeliveredPerMinute = last.Minute, &last.Delivered
			}
			d.Delivered, d.Owed = outboxCharts(out, from, end, rng)
		}
	}
	if err != nil {
		s.fail(w, r, "overview", err)
		return
	}
	d.Throughput, d.Latency, d.Depth, d.Reconciliations = flowCharts(flowRows, d.Flow, from, end, rng)
	d.SampleSize = sampleSize
	for _, x := range flowRows {
		if d.Flow != "" && x.Flow != d.Flow {
			continue
		}
		if x.LatencySample != nil {
			d.LatencySampled++
		}
		if x.RedeliveredSample != nil {
			d.RedeliveredSampled++
		}
	}
	s.render(w, r, http.StatusOK, "index", p)
}

// bucket is one point of the overview's flow charts: the sum over the chosen flows, of the
// minutes in one step.
type bucket struct {
	minutes                     int
	accepted, succeeded, failed float64
	redelivered, lastLooks      float64
	waiting, queueWaiting       float64 // the largest minute's
	queueRead                   bool
	finished                    float64 // operations with a latency
	startP50Sum, finishP50Sum   float64 // weighted by their minute's finished
	startP99, finishP99         float64 // the largest
	hasStart, hasFinish         bool
}

// flowCharts draws the flow samples of flow (empty: every flow) from from to end, one point
// per rng.Step: counts are summed; the waiting tasks and jobs are the step's largest minute
// (summed over flows within a minute); p50 is the mean of the minutes' and flows' p50s
// weighted by the operations finished, p99 the largest (an upper bound of the true p99).
func flowCharts(rows []FlowSample, flow string, from, end time.Time, rng overviewRange) (throughput, latency, depth, recon Chart) {
	n := rng.Points
	buckets := make([]bucket, n)
	// Within a minute first (the gauges are summed over flows), then over the step's minutes.
	type minuteGauge struct{ waiting, queue int64 }
	gauges := map[time.Time]*minuteGauge{}
	queueRead := map[time.Time]bool{}
	for _, x := range rows {
		if flow != "" && x.Flow != flow {
			continue
		}
		i := int(x.Minute.Sub(from) / rng.Step)
		if i < 0 || i >= n {
			continue
		}
		b := &buckets[i]
		b.accepted += float64(x.Accepted)
		b.succeeded += float64(x.Succeeded)
		b.failed += float64(x.Failed)
		b.redelivered += float64(x.Redelivered)
		b.lastLooks += float64(x.LastLooks)
		fin := float64(x.Succeeded + x.Failed)
		if x.StartP50 != nil {
			b.startP50Sum += *x.StartP50 * fin
			b.startP99 = max(b.startP99, *x.StartP99)
			b.hasStart = true
		}
		if x.FinishP50 != nil {
			b.finishP50Sum += *x.FinishP50 * fin
			b.finishP99 = max(b.finishP99, *x.FinishP99)
			b.finished += fin
			b.hasFinish = true
		}
		g := gauges[x.Minute]
		if g == nil {
			g = &minuteGauge{}
			gauges[x.Minute] = g
			b.minutes++
		}
		g.waiting += x.Waiting
		if x.QueueWaiting != nil {
			g.queue += *x.QueueWaiting
			queueRead[x.Minute] = true
		}
	}
	for m, g := range gauges {
		b := &buckets[int(m.Sub(from)/rng.Step)]
		b.waiting = max(b.waiting, float64(g.waiting))
		if queueRead[m] {
			b.queueWaiting = max(b.queueWaiting, float64(g.queue))
			b.queueRead = true
		}
	}
	series := func(f func(b bucket) float64) []float64 {
		out := make([]float64, n)
		for i, b := range buckets {
			if b.minutes == 0 {
				out[i] = math.NaN()
				continue
			}
			out[i] = f(b)
		}
		return out
	}
	per := "per minute"
	if rng.Step != time.Minute {
		per = "per ten minutes"
	}
	who := "every flow"
	if flow != "" {
		who = flow
	}
	base := Chart{End: end, Step: rng.Step}
	throughput, latency, depth, recon = base, base, base, base
	throughput.ID, throughput.Title, throughput.Unit = "throughput-chart", "Operations "+per+", "+who, "ops"
	throughput.Series = []Series{
		{"accepted", series(func(b bucket) float64 { return b.accepted })},
		{"succeeded", series(func(b bucket) float64 { return b.succeeded })},
		{"failed", series(func(b bucket) float64 { return b.failed })},
	}
	nanUnless := func(ok bool, v float64) float64 {
		if !ok {
			return math.NaN()
		}
		return v
	}
	latency.ID, latency.Title, latency.Unit = "latency-chart", "Commit → job start and commit → finish of the operations finished, "+who, "s"
	latency.Series = []Series{
		{"start p50", series(func(b bucket) float64 { return nanUnless(b.hasStart && b.finished > 0, b.startP50Sum/b.finished) })},
		{"start p99", series(func(b bucket) float64 { return nanUnless(b.hasStart, b.startP99) })},
		{"finish p50", series(func(b bucket) float64 { return nanUnless(b.hasFinish && b.finished > 0, b.finishP50Sum/b.finished) })},
		{"finish p99", series(func(b bucket) float64 { return nanUnless(b.hasFinish, b.finishP99) })},
	}
	depth.ID, depth.Title, depth.Unit = "depth-chart", "Tasks waiting (database) and jobs waiting in the queue (Redis), "+who, "tasks"
	depth.Series = []Series{
		{"tasks waiting", series(func(b bucket) float64 { return b.waiting })},
		{"jobs in the queue", series(func(b bucket) float64 { return nanUnless(b.queueRead, b.queueWaiting) })},
	}
	recon.ID, recon.Title, recon.Unit = "reconciliations-chart", "Redeliveries of stuck tasks and last looks "+per+", "+who, "jobs"
	recon.Series = []Series{
		{"redelivered", series(func(b bucket) float64 { return b.redelivered })},
		{"last looks", series(func(b bucket) float64 { return b.lastLooks })},
	}
	return throughput, latency, depth, recon
}

// outboxCharts draws the outbox samples: deliveries summed per step, owed the step's largest.
func outboxCharts(rows []OutboxSample, from, end time.Time, rng overviewRange) (delivered, owed Chart) {
	n := rng.Points
	del, own := make([]float64, n), make([]float64, n)
	for i := range n {
		del[i], own[i] = math.NaN(), math.NaN()
	}
	for _, x := range rows {
		i := int(x.Minute.Sub(from) / rng.Step)
		if i < 0 || i >= n {
			continue
		}
		if math.IsNaN(del[i]) {
			del[i], own[i] = 0, 0
		}
		del[i] += float64(x.Delivered)
		own[i] = max(own[i], float64(x.Owed))
	}
	per := "per minute"
	if rng.Step != time.Minute {
		per = "per ten minutes"
	}
	delivered = Chart{ID: "delivered-chart", Title: "Events delivered " + per, Unit: "events", End: end, Step: rng.Step,
		Series: []Series{{Name: "delivered", Points: del}}, Bars: true}
	owed = Chart{ID: "owed-chart", Title: "Events owed (pending or being dispatched)", Unit: "events", End: end, Step: rng.Step,
		Series: []Series{{Name: "owed", Points: own}}}
	return delivered, owed
}
