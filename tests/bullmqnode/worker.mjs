// A BullMQ 6.7.0 Worker whose behaviour per job comes from job.data:
//   behave: "ok" (default) | "fail" | "unrecoverable" | "failUntil"
//   failUntil: n  -> throws while job.attemptsMade < n
//   sleepMs: n    -> waits n ms before finishing
//   holdFirstMs: n -> on the first started attempt, waits n ms (kill tests)
// Config (argv[2] JSON): queue, prefix, concurrency, lockDuration,
// stalledInterval, maxStalledCount, drainDelay.
// Prints JSON lines: {"ev":"ready"}, {"ev":"start",id,attemptsMade,name},
// {"ev":"completed",id}, {"ev":"failed",id,attemptsMade,reason}.
// Closes gracefully on SIGTERM/SIGINT.
import { Worker, UnrecoverableError } from 'bullmq';
import { connection, config, emit, sleep } from './lib.mjs';

const cfg = config();
const worker = new Worker(
  cfg.queue,
  async job => {
    emit({ ev: 'start', id: job.id, attemptsMade: job.attemptsMade, name: job.name });
    const d = job.data || {};
    if (d.holdFirstMs && job.attemptsStarted <= 1) await sleep(d.holdFirstMs);
    if (d.sleepMs) await sleep(d.sleepMs);
    switch (d.behave) {
      case 'fail':
        throw new Error(`boom ${job.id}`);
      case 'unrecoverable':
        throw new UnrecoverableError(`fatal ${job.id}`);
      case 'failUntil':
        if (job.attemptsMade < d.failUntil) throw new Error(`not yet ${job.attemptsMade}`);
        break;
    }
    return { by: 'node', id: job.id, attempt: job.attemptsMade };
  },
  {
    connection: connection(),
    prefix: cfg.prefix || 'bull',
    concurrency: cfg.concurrency || 1,
    lockDuration: cfg.lockDuration || 30000,
    stalledInterval: cfg.stalledInterval || 30000,
    maxStalledCount: cfg.maxStalledCount ?? 1,
    drainDelay: cfg.drainDelay || 5,
  },
);
worker.on('completed', job => emit({ ev: 'completed', id: job.id }));
worker.on('failed', (job, err) => emit({ ev: 'failed', id: job && job.id, attemptsMade: job && job.attemptsMade, reason: err.message }));
worker.on('error', err => emit({ ev: 'error', message: String(err && err.message) }));

async function stop() {
  await worker.close();
  process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
await worker.waitUntilReady();
emit({ ev: 'ready' });
