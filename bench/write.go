package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/postgres"
)

// triggerSQL recreates the wake-up of sql/003 that sql/012 dropped, disabled: the reference
// line enables it for its own measurement only.
const triggerSQL = `
CREATE FUNCTION outbox_events_notify() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  PERFORM pg_notify('outbox_events', w.workspace_id::text)
  FROM (SELECT DISTINCT n.workspace_id FROM outbox_new_rows n) w;
  RETURN NULL;
END
$$;
CREATE TRIGGER outbox_events_notify AFTER INSERT ON outbox_events
  REFERENCING NEW TABLE AS outbox_new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION outbox_events_notify();
ALTER TABLE outbox_events DISABLE TRIGGER outbox_events_notify;`

// benchWrite measures the commits/s of an event-emitting command transaction (an operation
// row and one outbox event) with the service's wake-up (Redis), without any, and for
// reference with the coalesced NOTIFY after the commit (Wakeup with Postgres) and with the
// NOTIFY trigger of sql/003, at 8 and 32 clients, in o.rounds rounds whose order rotates.
func benchWrite(ctx context.Context, o options, t *table) error {
	db, err := newScratch(ctx, o.adminURL, 40)
	if err != nil {
		return err
	}
	defer db.drop()
	rdb, err := newRedis(ctx, o.redisURL, 10)
	if err != nil {
		return err
	}
	defer rdb.Close()
	wss, err := db.workspaces(ctx, 64)
	if err != nil {
		return err
	}
	if _, err := db.Owner.Exec(ctx, triggerSQL); err != nil {
		return err
	}
	wake, err := outbox.NewWakeup(outbox.WakeupConfig{Redis: rdb, Channel: "bench-wakeup-" + randomHex(4)})
	if err != nil {
		return err
	}
	defer wake.Close()
	notify, err := outbox.NewWakeup(outbox.WakeupConfig{Postgres: db.App, Channel: "bench_wakeup_" + randomHex(4)})
	if err != nil {
		return err
	}
	defer notify.Close()
	notified, err := outbox.NewEventPublisher(outbox.PublisherConfig{Routes: benchRoutes, Signal: notify})
	if err != nil {
		return err
	}
	plain, err := outbox.NewEventPublisher(outbox.PublisherConfig{Routes: benchRoutes})
	if err != nil {
		return err
	}
	woken, err := outbox.NewEventPublisher(outbox.PublisherConfig{Routes: benchRoutes, Signal: wake})
	if err != nil {
		return err
	}
	type config struct {
		name    string
		pub     *outbox.EventPublisher
		trigger bool
	}
	configs := []config{{"none", plain, false}, {"wakeup", woken, false}, {"notify", notified, false}, {"trigger", plain, true}}
	commits := map[string]map[int]int64{}
	for _, c := range configs {
		commits[c.name] = map[int]int64{}
	}
	for round := range o.rounds {
		for _, clients := range []int{8, 32} {
			for i := range configs {
				c := configs[(i+round)%len(configs)]
				if c.trigger {
					if _, err := db.Owner.Exec(ctx, `ALTER TABLE outbox_events ENABLE TRIGGER outbox_events_notify`); err != nil {
						return err
					}
				}
				n, err := commitFor(ctx, db, wss, c.pub, clients, o.writeSecs)
				if c.trigger {
					if _, err := db.Owner.Exec(ctx, `ALTER TABLE outbox_events DISABLE TRIGGER outbox_events_notify`); err != nil {
						return err
					}
				}
				if err != nil {
					return err
				}
				commits[c.name][clients] += n
				fmt.Printf("   round %d, %d clients, %-7s %6.0f commits/s\n", round+1, clients, c.name, float64(n)/o.writeSecs.Seconds())
			}
		}
		if _, err := db.Owner.Exec(ctx, `TRUNCATE outbox_events, outbox_dispatched, operations CASCADE`); err != nil {
			return err
		}
	}
	secs := float64(o.rounds) * o.writeSecs.Seconds()
	for _, clients := range []int{8, 32} {
		none := float64(commits["none"][clients]) / secs
		w := float64(commits["wakeup"][clients]) / secs
		tr := float64(commits["trigger"][clients]) / secs
		nt := float64(commits["notify"][clients]) / secs
		t.add(line{measure: fmt.Sprintf("write path, %d clients: wake-up vs none", clients), ours: perSec(w, "commits"),
			peer: "no wake-up", peerFig: perSec(none, "commits"), ratio: w / none, target: "≥ 0.90×", met: w/none >= 0.9})
		t.add(line{measure: fmt.Sprintf("write path, %d clients: coalesced NOTIFY after commit vs none", clients), ours: perSec(nt, "commits"),
			peer: "no wake-up", peerFig: perSec(none, "commits"), ratio: nt / none, target: "reference", info: true})
		t.add(line{measure: fmt.Sprintf("write path, %d clients: NOTIFY trigger (sql/003) vs none", clients), ours: perSec(tr, "commits"),
			peer: "no wake-up", peerFig: perSec(none, "commits"), ratio: tr / none, target: "reference", info: true})
	}
	return nil
}

// commitFor runs clients committers for d, each committing transactions of one operation row
// and one outbox event in its own workspace, and returns the number of commits.
func commitFor(ctx context.Context, db *scratch, wss []uuid.UUID, pub *outbox.EventPublisher, clients int, d time.Duration) (int64, error) {
	var n atomic.Int64
	var firstErr error
	var once sync.Once
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for c := range clients {
		ws := wss[c%len(wss)]
		wg.Go(func() {
			for time.Now().Before(deadline) {
				id := uuid.Must(uuid.NewV7())
				err := postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `INSERT INTO operations (id, workspace_id, type, resource_type, resource_id)
						VALUES ($1, $2, 'bench.write', 'thing', $1)`, id, ws); err != nil {
						return err
					}
					return pub.Publish(ctx, benchHappened{ID: id, ThingID: id.String()})
				})
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return n.Load(), firstErr
}
