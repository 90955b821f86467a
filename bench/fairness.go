package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/app/worker/storeverify"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/outbox"
)

// fairOptions size the fairness section (flags -fair-*).
type fairOptions struct {
	backlog    int  // workspace N's tasks queued at once
	secs       int  // Q publishes one task a second for this long
	workspaces int  // the many-workspaces drain: workspaces ...
	per        int  // ... times tasks each
	alone      bool // only N alone, fair share on against off (-fair-alone)
	progress   bool // print N's jobs done every 5 s (-fair-progress)
	factor     int  // FairShare.AloneFactor (-fair-alone-factor)
}

// benchFairness measures fair share (FAIR_SHARE_SLOTS, the default 4 × workers) against the
// FIFO build (fair share off), end to end as benchE2E (outbox → dispatcher → BullMQ → Runner
// → worker.Flow with a no-op call): workspace N queues a backlog at once, then workspace Q
// publishes one task a second; Q's commit → job start p99, N's throughput over the same
// period against N alone, and N alone against N alone with fair share off; and the drain time of many workspaces with a few tasks each.
func benchFairness(ctx context.Context, o options, t *table) error {
	f := o.fair
	slots := config.FairShareFactor * o.workers
	if f.alone {
		return benchFairAlone(ctx, o, t, slots)
	}
	fair, err := fairRun(ctx, o, slots, []int{f.backlog}, f.secs, true)
	if err != nil {
		return fmt.Errorf("fair share: %w", err)
	}
	fifo, err := fairRun(ctx, o, 0, []int{f.backlog}, f.secs, true)
	if err != nil {
		return fmt.Errorf("FIFO: %w", err)
	}
	alone, aloneFIFO, err := fairAlone(ctx, o, slots)
	if err != nil {
		return err
	}
	fmt.Printf("   Q's commit → job start p99: fair share %s, FIFO %s; N's jobs/s: %.0f, alone %.0f, alone with fair share off %.0f\n",
		fair.qP99.Round(time.Millisecond), fifo.qP99.Round(time.Millisecond), fair.nRate, alone.nRate, aloneFIFO.nRate)
	t.add(line{measure: fmt.Sprintf("fairness: Q's commit → job start p99 behind N's %d", f.backlog),
		ours: fair.qP99.Round(time.Millisecond).String(), peer: "FIFO (fair share off)", peerFig: fifo.qP99.Round(time.Millisecond).String(),
		ratio: fair.qP99.Seconds() / max(fifo.qP99.Seconds(), 1e-9), target: "≤ 2s", met: fair.qP99 <= 2*time.Second})
	t.add(line{measure: "fairness: N's throughput beside Q", ours: perSec(fair.nRate, "jobs"), peer: "N alone", peerFig: perSec(alone.nRate, "jobs"),
		ratio: fair.nRate / alone.nRate, target: "≥ 0.9×", met: fair.nRate/alone.nRate >= 0.9})
	addAloneLine(t, alone, aloneFIFO)

	many := make([]int, f.workspaces)
	for i := range many {
		many[i] = f.per
	}
	fairDrain, err := fairRun(ctx, o, slots, many, 0, false)
	if err != nil {
		return fmt.Errorf("many workspaces, fair share: %w", err)
	}
	fifoDrain, err := fairRun(ctx, o, 0, many, 0, false)
	if err != nil {
		return fmt.Errorf("many workspaces, FIFO: %w", err)
	}
	t.add(line{measure: fmt.Sprintf("fairness: %d workspaces × %d jobs drain", f.workspaces, f.per),
		ours: fairDrain.drain.Round(time.Millisecond).String(), peer: "FIFO (fair share off)", peerFig: fifoDrain.drain.Round(time.Millisecond).String(),
		ratio: fairDrain.drain.Seconds() / fifoDrain.drain.Seconds(), target: "≤ 1.1×", met: fairDrain.drain.Seconds() <= 1.1*fifoDrain.drain.Seconds()})
	return nil
}

// benchFairAlone runs N alone only, fair share on against off (-fair-alone).
func benchFairAlone(ctx context.Context, o options, t *table, slots int) error {
	alone, aloneFIFO, err := fairAlone(ctx, o, slots)
	if err != nil {
		return err
	}
	addAloneLine(t, alone, aloneFIFO)
	return nil
}

// fairAlone runs workspace N's backlog alone, with fair share (slots) and without.
func fairAlone(ctx context.Context, o options, slots int) (alone, aloneFIFO fairResult, err error) {
	f := o.fair
	if alone, err = fairRun(ctx, o, slots, []int{f.backlog}, f.secs, false); err != nil {
		return alone, aloneFIFO, fmt.Errorf("N alone: %w", err)
	}
	if aloneFIFO, err = fairRun(ctx, o, 0, []int{f.backlog}, f.secs, false); err != nil {
		return alone, aloneFIFO, fmt.Errorf("N alone, FIFO: %w", err)
	}
	return alone, aloneFIFO, nil
}

// addAloneLine adds the line of N alone: one workspace alone loses at most a tenth of its
// throughput to fair share.
func addAloneLine(t *table, alone, aloneFIFO fairResult) {
	t.add(line{measure: "fairness: N alone, fair share on", ours: perSec(alone.nRate, "jobs"), peer: "fair share off", peerFig: perSec(aloneFIFO.nRate, "jobs"),
		ratio: alone.nRate / aloneFIFO.nRate, target: "≥ 0.9×", met: alone.nRate/aloneFIFO.nRate >= 0.9})
}

// fairResult is one run's figures.
type fairResult struct {
	qP99 time.Duration // Q's commit → job start p99 (when Q published)
	// nRate is workspace 0's (N's) jobs done per second while Q publishes: its jobs done in
	// the secs seconds over those seconds, or, when N's backlog drains before they end, over
	// the time it took (a rate over the window would count the idle rest). The rule: N's
	// throughput is measured only while N has work, so that beside Q and alone compare the
	// same thing whatever the backlog's size.
	nRate float64
	// nDrained: N's backlog drained before the secs seconds ended.
	nDrained bool
	drain    time.Duration // every task done (when secs is 0)
}

// fairRun commits backlog[i] store verifications in workspace i (verifications.commitAll,
// 100 per transaction; not timed), starts a dispatcher with slots (0: fair share off) and a Runner
// of o.workers; for secs seconds, it measures workspace 0's jobs done and, with withQ,
// commits one task a second in one more workspace (Q), measuring each one's commit → job
// start; then it waits until every task is done.
func fairRun(ctx context.Context, o options, slots int, backlog []int, secs int, withQ bool) (fairResult, error) {
	var res fairResult
	db, err := newScratch(ctx, o.adminURL, 60)
	if err != nil {
		return res, err
	}
	defer db.drop()
	wss, err := db.workspaces(ctx, len(backlog)+1)
	if err != nil {
		return res, err
	}
	q := wss[len(backlog)]
	v, err := newVerifications(ctx, db, wss)
	if err != nil {
		return res, err
	}
	var batches []verifyBatch
	total := 0
	for i, n := range backlog {
		total += n
		for done := 0; done < n; done += 100 {
			batches = append(batches, verifyBatch{ws: wss[i], k: min(100, n-done)})
		}
	}
	if err := v.commitAll(ctx, batches); err != nil {
		return res, err
	}

	fq := fairQueues()
	var start time.Time // set before the pipeline runs, read by its jobs only after
	var handled, nDone atomic.Int64
	var nLast atomic.Int64 // N's last job done, in ns since start
	var startsMu sync.Mutex
	starts := map[uuid.UUID]time.Time{} // Q's tasks: first job start
	nAt := map[uuid.UUID]int64{}        // Q's tasks: N's jobs done when it started
	kind := storeverify.Tasks(worker.Deps{}, v.tasks)
	p, err := v.pipeline(ctx, o, outbox.DispatcherConfig{MetricsInterval: -1, DisableListen: true,
		FairShare: outbox.FairShare{Slots: slots, AloneFactor: o.fair.factor, Queues: fq, LaneField: "store_id"}},
		func(ctx context.Context, job worker.Job, handle worker.Handler) error {
			if job.WorkspaceID == q {
				if id, err := kind.TaskID(job); err == nil {
					startsMu.Lock()
					if _, ok := starts[id]; !ok {
						starts[id] = time.Now()
						nAt[id] = nDone.Load()
					}
					startsMu.Unlock()
				}
			}
			err := handle.Handle(ctx, job)
			if err == nil || worker.IsPermanent(err) { // a task failed for good is done too
				handled.Add(1)
				if job.WorkspaceID == wss[0] {
					if nDone.Add(1) == int64(backlog[0]) {
						nLast.Store(int64(time.Since(start)))
					}
				}
			}
			return err
		})
	if err != nil {
		return res, err
	}
	defer p.close()
	start = time.Now()
	stop := p.run(ctx)
	defer stop()
	if o.fair.progress {
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			tick := time.NewTicker(5 * time.Second)
			defer tick.Stop()
			for prev := int64(0); ; {
				select {
				case <-pctx.Done():
					return
				case <-tick.C:
				}
				n := nDone.Load()
				fmt.Printf("     +%3.0fs N done %d (%d/s)\n", time.Since(start).Seconds(), n, (n-prev)/5)
				prev = n
			}
		}()
	}

	commits := map[uuid.UUID]time.Time{}
	if secs > 0 {
		tick := time.NewTicker(time.Second)
		for range secs {
			select {
			case <-ctx.Done():
				tick.Stop()
				return res, ctx.Err()
			case <-tick.C:
			}
			if !withQ {
				continue
			}
			ids, err := v.commit(ctx, q, 1)
			if err != nil {
				tick.Stop()
				return res, err
			}
			commits[ids[0]] = time.Now()
			total++
		}
		tick.Stop()
		window := time.Since(start)
		if last := time.Duration(nLast.Load()); last > 0 {
			window, res.nDrained = last, true
		}
		res.nRate = float64(nDone.Load()) / window.Seconds()
	}
	if err := waitDone(ctx, db, handled.Load, total, `SELECT count(*) FROM store_verifications WHERE status IN ('succeeded', 'failed')`); err != nil {
		return res, err
	}
	res.drain = time.Since(start)
	var failed int
	if err := db.Owner.QueryRow(ctx, `SELECT count(*) FROM store_verifications WHERE status = 'failed'`).Scan(&failed); err != nil {
		return res, err
	}
	if failed > 0 {
		fmt.Printf("   %d tasks failed (a loaded machine: their attempts ran out)\n", failed)
	}
	if withQ {
		var lat []time.Duration
		type sample struct {
			at, lat time.Duration
			n       int64
		}
		var samples []sample
		startsMu.Lock()
		for id, c := range commits {
			if s, ok := starts[id]; ok {
				lat = append(lat, s.Sub(c))
				samples = append(samples, sample{c.Sub(start), s.Sub(c), nAt[id]})
			}
		}
		startsMu.Unlock()
		// Where Q's latency is lost: each of Q's commit → job start against the time since
		// N's backlog began to drain, the slow ones (over 500 ms) and every tenth, with N's
		// jobs done by then: Q's job waits behind up to the slots' N jobs in the queue, so a
		// slow start of N's throughput (while its backlog is first being held) shows here.
		slices.SortFunc(samples, func(a, b sample) int { return int(a.at - b.at) })
		for i, x := range samples {
			if x.lat > 500*time.Millisecond || i%10 == 0 {
				fmt.Printf("     Q at +%5.1fs: commit → start %s; N's jobs done by then %d\n", x.at.Seconds(), x.lat.Round(time.Millisecond), x.n)
			}
		}
		slices.Sort(lat)
		if len(lat) > 0 {
			res.qP99 = lat[min(len(lat)-1, len(lat)*99/100)]
		}
	}
	fmt.Printf("   slots %d, %d workspaces, Q %t: done in %s; N %.0f jobs/s (drained within the window: %t); Q p99 %s\n", slots, len(backlog), withQ,
		res.drain.Round(time.Millisecond), res.nRate, res.nDrained, res.qP99.Round(time.Millisecond))
	return res, nil
}

// fairQueues are the flows' request queues, fair-shared as the service shares them
// (FAIR_SHARE_SLOTS).
func fairQueues() []outbox.FairQueue {
	var fq []outbox.FairQueue
	for _, s := range flows.All() {
		fq = append(fq, outbox.FairQueue{Flow: s.Name, Queue: s.Queue, TaskIDField: s.TaskIDField, Table: s.Table})
	}
	return fq
}
