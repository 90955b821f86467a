package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// taskTables are the domain tasks; each row has an operation.
var taskTables = []string{"store_verifications", "media_processings", "material_transfers",
	"publications", "product_syncs", "ai_tasks"}

const notTerminal = `status NOT IN ('succeeded', 'failed')`

// settled is how the settling phase ended.
type settled struct {
	openAtStop    int // operations not terminal when the chaos stopped (the backlog)
	allTerminal   bool
	allTerminalAt time.Time // when the harness saw none left
	drainedAt     time.Time // when the queues first held no waiting job and the outbox no pending event
}

// backlogScript counts the waiting jobs of every queue under the prefix ARGV[1]: the wait
// lists and the prioritized sets (not the delayed ones: a retry's backoff is in the bound).
const backlogScript = `local n = 0
for _, k in ipairs(redis.call('KEYS', ARGV[1] .. ':*:wait')) do n = n + redis.call('LLEN', k) end
for _, k in ipairs(redis.call('KEYS', ARGV[1] .. ':*:prioritized')) do n = n + redis.call('ZCARD', k) end
return n`

// backlog returns the jobs waiting in the queues plus the outbox events not yet dispatched.
func (h *harness) backlog(ctx context.Context) (int, error) {
	out, err := h.redis.cli("eval", backlogScript, "0", h.prefix)
	if err != nil {
		return 0, err
	}
	jobs, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return 0, fmt.Errorf("waiting jobs: %q: %v", out, err)
	}
	var events int
	if err := h.owner.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&events); err != nil {
		return 0, err
	}
	return jobs + events, nil
}

// settle waits until every operation in the database is terminal, at most the largest bound
// plus -settle-grace after the later of the chaos stop and the backlog's drain (noted in
// drainedAt), and at most maxSettle after the chaos stopped.
func (h *harness) settle(ctx context.Context, chaosStopped time.Time) (settled, error) {
	const maxSettle = 30 * time.Minute
	largest := h.o.bound(maxRedeliveryDoublings)
	h.log.Info("settling: waiting for every operation to be terminal", "bound_without_redeliveries", h.o.bound(0),
		"largest_bound", largest, "from", "the later of the chaos stop and the backlog's drain")
	lastLog := time.Now()
	var res settled
	if err := h.owner.QueryRow(ctx, `SELECT count(*) FROM operations WHERE `+notTerminal).Scan(&res.openAtStop); err != nil {
		return settled{}, err
	}
	for {
		var open int
		if err := h.owner.QueryRow(ctx, `SELECT count(*) FROM operations WHERE `+notTerminal).Scan(&open); err != nil {
			return settled{}, err
		}
		if res.drainedAt.IsZero() {
			if waiting, err := h.backlog(ctx); err != nil {
				h.log.Warn("settling: the backlog could not be read", "err", err)
			} else if waiting == 0 {
				res.drainedAt = time.Now()
			}
		}
		if open == 0 {
			res.allTerminal, res.allTerminalAt = true, time.Now()
			if res.drainedAt.IsZero() {
				res.drainedAt = res.allTerminalAt
			}
			return res, nil
		}
		from := res.drainedAt
		if from.IsZero() {
			from = time.Now()
		}
		if time.Now().After(from.Add(largest+h.o.settleGrace)) || time.Since(chaosStopped) > maxSettle {
			return res, nil
		}
		if time.Since(lastLog) > 10*time.Second {
			h.log.Info("settling", "not_terminal", open, "since_chaos", time.Since(chaosStopped).Round(time.Second),
				"backlog_drained", !res.drainedAt.IsZero())
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return settled{}, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// report holds the figures of a run.
type report struct {
	settled
	chaosStopped, clientsDone time.Time
	bound                     time.Duration
	accepted                  map[string]int // by kind
	acceptedOps               int
	acceptedMissing           int // accepted operation ids not in the database
	refused                   map[string]int
	abandoned                 map[string]int
	retries, replayed         int
	chaos                     map[string]int64
	starts, unexpected        map[string]int64
	opsTotal                  int
	opsBy                     []row // type, status, error_code, count
	lastTerminal              time.Time
	reconciliations           int
	reconciledTasks           int
	redeliveries              int // free redeliveries (a task not run since, a last look asked again)
	redeliveredTasks          int
	maxRedeliveries           int // of one task: the reconciler's backoff in the bound
	exhausted, stalled        int
	unknown                   int      // failed OUTCOME_UNKNOWN: no last look completed before TASK_MAX_AGE
	unlooked                  int      // failed with a held failure while no last look completed
	exhaustedBy               []row    // queue table, task attempts, count
	failedListed              []string // failed publications with a platform product
	mismatch                  int      // tasks whose operation has another status
	// Duplicates.
	productsByRef      int // external_refs with more than one platform product
	dupRefs            []string
	platformProducts   int
	ledgerDup          int
	ledgerRows         int
	aiTasksBilled      int // AI tasks that succeeded
	aiExecutions       int
	storeDup           int
	externalIDDup      int
	rowsOverAccepted   []string // kinds with more rows than requests sent
	rowsVsAccepted     []string
	notTerminal        []string // one line per operation, with its task and outbox rows
	notTerminalCount   int
	ignoreKeyAtTheEnd  bool
	marketplaceCreated int
}

type row struct {
	cols  []string
	count int
}

func (r report) ok() bool {
	return r.allTerminal && r.notTerminalCount == 0 && !r.late() && r.productsByRef == 0 && r.ledgerDup == 0 &&
		r.storeDup == 0 && r.externalIDDup == 0 && len(r.rowsOverAccepted) == 0 && r.acceptedMissing == 0 && r.mismatch == 0
}

// late reports whether the last operation became terminal after the bound, counted from the
// later of the chaos stop and the backlog's drain.
func (r report) late() bool {
	return r.lastTerminal.Sub(r.boundFrom()) > r.bound
}

// boundFrom is when the bound starts: the later of the chaos stop and the backlog's drain.
func (r report) boundFrom() time.Time {
	if r.drainedAt.After(r.chaosStopped) {
		return r.drainedAt
	}
	return r.chaosStopped
}

// collect reads the figures from the database, the sandboxes and the ledger.
func (h *harness) collect(ctx context.Context, chaosStopped, clientsDone time.Time, s settled) (*report, error) {
	r := &report{settled: s, chaosStopped: chaosStopped, clientsDone: clientsDone}
	q := func(sql string, args ...any) int {
		var n int
		if err := h.owner.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			h.log.Error("query", "sql", sql, "err", err)
			return -1
		}
		return n
	}

	h.ledger.mu.Lock()
	r.accepted = copyMap(h.ledger.byKind)
	r.refused = copyMap(h.ledger.refused)
	r.abandoned = copyMap(h.ledger.abandoned)
	r.retries, r.replayed = h.ledger.retries, h.ledger.replayed
	ids := make([]string, 0, len(h.ledger.ops))
	for id := range h.ledger.ops {
		ids = append(ids, id)
	}
	h.ledger.mu.Unlock()
	r.acceptedOps = len(ids)
	r.acceptedMissing = len(ids) - q(`SELECT count(*) FROM operations WHERE id = ANY($1::uuid[])`, ids)
	r.chaos, r.starts, r.unexpected = map[string]int64{}, map[string]int64{}, map[string]int64{}
	for k, v := range h.chaosDone {
		r.chaos[k] = v.Load()
	}
	for _, p := range h.procs() {
		r.starts[p.name], r.unexpected[p.name] = p.starts.Load(), p.unexpected.Load()
	}

	r.opsTotal = q(`SELECT count(*) FROM operations`)
	rows, err := h.owner.Query(ctx, `SELECT type, status, error_code, count(*) FROM operations GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var t, st, code string
		var n int
		if err := rows.Scan(&t, &st, &code, &n); err != nil {
			return nil, err
		}
		r.opsBy = append(r.opsBy, row{cols: []string{t, st, code}, count: n})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := h.owner.QueryRow(ctx, `SELECT coalesce(max(updated_at), now()) FROM operations`).Scan(&r.lastTerminal); err != nil {
		return nil, err
	}
	for _, t := range taskTables {
		r.reconciliations += q(`SELECT coalesce(sum(reconciliations), 0)::int FROM ` + t)
		r.reconciledTasks += q(`SELECT count(*) FROM ` + t + ` WHERE reconciliations > 0`)
		r.redeliveries += q(`SELECT coalesce(sum(redeliveries), 0)::int FROM ` + t)
		r.redeliveredTasks += q(`SELECT count(*) FROM ` + t + ` WHERE redeliveries > 0`)
		r.maxRedeliveries = max(r.maxRedeliveries, q(`SELECT coalesce(max(redeliveries), 0)::int FROM `+t))
	}
	r.bound = h.o.bound(r.maxRedeliveries)
	for _, t := range taskTables {
		r.mismatch += q(`SELECT count(*) FROM ` + t + ` t JOIN operations o ON o.id = t.operation_id
			WHERE o.status <> t.status OR o.error_code <> t.error_code`)
	}
	r.exhausted = q(`SELECT count(*) FROM operations WHERE error_code = 'DELIVERY_EXHAUSTED'`)
	r.stalled = q(`SELECT count(*) FROM operations WHERE error_code = 'JOB_STALLED'`)
	r.unknown = q(`SELECT count(*) FROM operations WHERE error_code = 'OUTCOME_UNKNOWN'`)
	for _, t := range taskTables {
		r.unlooked += q(`SELECT count(*) FROM ` + t + ` WHERE status = 'failed' AND look_code IS NOT NULL
			AND error_code <> 'OUTCOME_UNKNOWN' AND look_found IS DISTINCT FROM 'not_done'`)
	}
	for _, t := range taskTables {
		rows, err := h.owner.Query(ctx, `SELECT attempts, count(*) FROM `+t+` WHERE error_code = 'DELIVERY_EXHAUSTED' GROUP BY 1 ORDER BY 1`)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var attempts, n int
			if err := rows.Scan(&attempts, &n); err != nil {
				return nil, err
			}
			r.exhaustedBy = append(r.exhaustedBy, row{cols: []string{t, fmt.Sprint(attempts)}, count: n})
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}

	// Duplicates.
	st := h.market.Stats()
	r.ignoreKeyAtTheEnd, r.marketplaceCreated = st.IgnoreIdempotencyKey, st.ProductsCreated
	for ref, n := range st.ProductsByExternalRef {
		r.platformProducts += n
		if n > 1 {
			r.productsByRef++
			r.dupRefs = append(r.dupRefs, fmt.Sprintf("%s×%d", ref, n))
		}
	}
	sort.Strings(r.dupRefs)
	// A failed publication should have left nothing on the platform.
	rows, err = h.owner.Query(ctx, `SELECT id::text, error_code, attempts, reconciliations FROM publications WHERE status = 'failed'`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, code string
		var attempts, recon int
		if err := rows.Scan(&id, &code, &attempts, &recon); err != nil {
			return nil, err
		}
		if n := st.ProductsByExternalRef[id]; n > 0 {
			r.failedListed = append(r.failedListed, fmt.Sprintf("%s %s attempts=%d reconciliations=%d products=%d", id, code, attempts, recon, n))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	r.ledgerDup = q(`SELECT count(*) FROM (SELECT ai_task_id FROM ai_usage_ledger GROUP BY 1 HAVING count(*) > 1) d`)
	r.ledgerRows = q(`SELECT count(*) FROM ai_usage_ledger`)
	r.aiTasksBilled = q(`SELECT count(*) FROM ai_tasks WHERE status = 'succeeded'`)
	for _, n := range h.ai.Stats().Executions {
		r.aiExecutions += n
	}
	r.storeDup = q(`SELECT count(*) FROM (SELECT 1 FROM stores GROUP BY workspace_id, platform, shop_id HAVING count(*) > 1) d`)
	r.externalIDDup = q(`SELECT count(*) FROM (SELECT 1 FROM publications WHERE external_product_id <> ''
		GROUP BY store_id, external_product_id HAVING count(*) > 1) d`)
	// Every accepted or abandoned request made at most one row; nothing else makes rows of
	// these tables (transfers make media, not transfers).
	for _, k := range []struct{ kind, table string }{
		{kindStore, "stores"}, {kindProduct, "products"}, {kindPublication, "publications"},
		{kindSync, "product_syncs"}, {kindAI, "ai_tasks"}, {kindTransfer, "material_transfers"},
	} {
		n := q(`SELECT count(*) FROM ` + k.table)
		sent := r.accepted[k.kind] + r.abandoned[k.kind]
		line := fmt.Sprintf("%s: %d rows, %d accepted + %d given up", k.table, n, r.accepted[k.kind], r.abandoned[k.kind])
		r.rowsVsAccepted = append(r.rowsVsAccepted, line)
		if n > sent {
			r.rowsOverAccepted = append(r.rowsOverAccepted, line)
		}
	}

	// What is not terminal, with its task and outbox rows.
	r.notTerminalCount = q(`SELECT count(*) FROM operations WHERE ` + notTerminal)
	if r.notTerminalCount > 0 {
		r.notTerminal, err = h.explainOpen(ctx)
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

// explainOpen describes up to 50 operations that are not terminal.
func (h *harness) explainOpen(ctx context.Context) ([]string, error) {
	var union []string
	for _, t := range taskTables {
		union = append(union, fmt.Sprintf(`SELECT '%s' AS tbl, id, operation_id, status, attempts, reconciliations, updated_at FROM %s`, t, t))
	}
	rows, err := h.owner.Query(ctx, `SELECT o.id::text, o.type, o.status, o.updated_at, coalesce(t.tbl, '-'), coalesce(t.id::text, '-'),
		coalesce(t.status, '-'), coalesce(t.attempts, 0), coalesce(t.reconciliations, 0), t.updated_at,
		coalesce((SELECT string_agg(e.event_type || '/' || e.status || '/attempts=' || e.attempt_count || '/dispatched=' ||
			coalesce(to_char(e.dispatched_at, 'HH24:MI:SS.MS'), '-') || '/id=' || e.id, '; ' ORDER BY e.created_at)
			FROM outbox_all_events e WHERE e.aggregate_id = t.id::text OR e.event_payload::text LIKE '%' || t.id::text || '%'), 'no outbox rows')
		FROM operations o LEFT JOIN (`+strings.Join(union, " UNION ALL ")+`) t ON t.operation_id = o.id
		WHERE o.`+notTerminal+` ORDER BY o.updated_at LIMIT 50`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, typ, status, tbl, taskID, taskStatus, outbox string
		var attempts, recon int
		var opUpdated time.Time
		var taskUpdated *time.Time
		if err := rows.Scan(&id, &typ, &status, &opUpdated, &tbl, &taskID, &taskStatus, &attempts, &recon, &taskUpdated, &outbox); err != nil {
			return nil, err
		}
		tu := "-"
		if taskUpdated != nil {
			tu = taskUpdated.Format(time.TimeOnly + ".000")
		}
		out = append(out, fmt.Sprintf("operation %s %s %s (updated %s); task %s %s %s attempts=%d reconciliations=%d updated %s; outbox: %s",
			id, typ, status, opUpdated.Format(time.TimeOnly+".000"), tbl, taskID, taskStatus, attempts, recon, tu, outbox))
	}
	return out, rows.Err()
}

func copyMap[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// print writes the report.
func (r *report) print(w io.Writer, h *harness) {
	o := h.o
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("")
	p("=== chaos report (seed %d, logs in %s, database %s)", o.seed, o.dir, h.dbName)
	p("settings: JOB_LOCK_DURATION=%s JOB_STALLED_INTERVAL=%s JOB_MAX_STALLS=%d JOB_ATTEMPTS=%d WORKER_CONCURRENCY=%d OUTBOX_LEASE=%s",
		o.lock, o.stalledInterval, o.maxStalls, o.jobAttempts, o.concurrency, o.lease)
	p("          RECONCILE_AFTER=%s RECONCILE_INTERVAL=%s RECONCILE_MAX=%d; marketplace latency %s", o.after, o.interval, o.reconcileMax, o.sandboxLatency)
	p("bound: OUTBOX_LEASE + RECONCILE_AFTER + RECONCILE_INTERVAL x 2^min(%d free redeliveries of one task at most, %d) + max(JOB_LOCK_DURATION + JOB_STALLED_INTERVAL, 2 x PLATFORM_TIMEOUT + %s fence margin) + backoff %s + job budget %s = %s,",
		r.maxRedeliveries, maxRedeliveryDoublings, fenceMargin, o.backoff(), o.jobBudget, r.bound)
	p("       from the later of the chaos stop and the drain of the backlog left then (no waiting job, no pending outbox event)")
	rate := "unpaced"
	if o.rate > 0 {
		rate = fmt.Sprintf("at most %g actions/s", o.rate)
	}
	p("load: %s with %d clients on %d accounts, %s; chaos every %s on average from [%s]", o.duration, o.clients, o.accounts, rate, o.chaosEvery, o.chaos)
	p("")
	p("accepted requests (2xx with an operation): %d", r.acceptedOps)
	for _, k := range sortedKeys(r.accepted) {
		p("  %-12s %6d", k, r.accepted[k])
	}
	p("  (products are created without an operation and not counted in the total)")
	p("client retries with the same key: %d; answers replayed: %d", r.retries, r.replayed)
	for _, k := range sortedKeys(r.refused) {
		p("refused: %-50s %d", k, r.refused[k])
	}
	for _, k := range sortedKeys(r.abandoned) {
		p("given up after %s of retries: %s %d", o.requestBudget, k, r.abandoned[k])
	}
	p("accepted operations missing from the database: %d", r.acceptedMissing)
	p("")
	p("chaos actions performed:")
	for _, k := range sortedKeys(r.chaos) {
		p("  %-9s %d", k, r.chaos[k])
	}
	for _, k := range sortedKeys(r.starts) {
		p("  %-10s started %d times, exited on its own %d times", k, r.starts[k], r.unexpected[k])
	}
	p("")
	p("operations in the database: %d (type, status, error code)", r.opsTotal)
	for _, x := range r.opsBy {
		p("  %-22s %-10s %-28s %6d", x.cols[0], x.cols[1], x.cols[2], x.count)
	}
	p("not terminal: %d", r.notTerminalCount)
	for _, l := range r.notTerminal {
		p("  %s", l)
	}
	since := max(r.lastTerminal.Sub(r.chaosStopped), 0) // 0: all were terminal when it stopped
	verdict := "within the bound"
	if r.late() {
		verdict = "LATE: beyond the bound"
	}
	if !r.allTerminal {
		verdict = "NOT ALL TERMINAL"
	}
	p("not terminal when the chaos stopped (backlog, lost jobs and jobs in flight): %d", r.openAtStop)
	p("backlog drained %s after the chaos stopped", max(r.drainedAt.Sub(r.chaosStopped), 0).Round(10*time.Millisecond))
	p("last operation terminal %s after the chaos stopped, %s after the bound's start (clients' last requests done %s after the stop); bound %s: %s",
		since.Round(10*time.Millisecond), max(r.lastTerminal.Sub(r.boundFrom()), 0).Round(10*time.Millisecond),
		r.clientsDone.Sub(r.chaosStopped).Round(10*time.Millisecond), r.bound, verdict)
	p("tasks whose operation has another status or error code: %d", r.mismatch)
	p("reconciliations (a task that ran, delivered again): %d over %d tasks; DELIVERY_EXHAUSTED %d; JOB_STALLED %d", r.reconciliations, r.reconciledTasks, r.exhausted, r.stalled)
	p("free redeliveries (a task not run since, a last look asked again): %d over %d tasks, at most %d for one task", r.redeliveries, r.redeliveredTasks, r.maxRedeliveries)
	p("OUTCOME_UNKNOWN (no last look completed before TASK_MAX_AGE) %d; failed without a completed last look: %d", r.unknown, r.unlooked)
	for _, x := range r.exhaustedBy {
		p("  DELIVERY_EXHAUSTED %-20s with %s attempts (handler runs): %d", x.cols[0], x.cols[1], x.count)
	}
	p("failed publications that left a product on the platform: %d", len(r.failedListed))
	for _, l := range r.failedListed {
		p("  %s", l)
	}
	p("")
	p("duplicates:")
	p("  platform products per publication external_ref > 1: %d %v (marketplace: %d products for %d refs; ignoring Idempotency-Key at the end: %v)",
		r.productsByRef, r.dupRefs, r.platformProducts, len(h.market.Stats().ProductsByExternalRef), r.ignoreKeyAtTheEnd)
	p("  publications sharing one platform product: %d", r.externalIDDup)
	p("  AI ledger rows per task > 1: %d (ledger rows %d, AI tasks succeeded %d, provider executions %d)",
		r.ledgerDup, r.ledgerRows, r.aiTasksBilled, r.aiExecutions)
	p("  stores per (workspace, platform, shop_id) > 1: %d", r.storeDup)
	for _, l := range r.rowsVsAccepted {
		p("  %s", l)
	}
	if len(r.rowsOverAccepted) > 0 {
		p("  MORE ROWS THAN REQUESTS: %v", r.rowsOverAccepted)
	}
	p("")
	if r.ok() {
		p("RESULT: PASS — every operation terminal within the bound, nothing duplicated")
	} else {
		p("RESULT: FAIL — database %s kept for investigation", h.dbName)
	}
}
