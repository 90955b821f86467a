// Benchmark: a Node.js BullMQ Worker with a no-op processor drains n jobs.
// Config (argv[2] JSON): queue, prefix, n, concurrency. Prints
// {"n":..,"ms":..} measured from the first job started to the n-th completed.
import { Worker } from 'bullmq';
import { connection, config, emit } from './lib.mjs';

const cfg = config();
const n = cfg.n || 100000;
let done = 0;
let start = 0n;
let finish;
const finished = new Promise(r => (finish = r));
const worker = new Worker(cfg.queue, async () => {
  if (start === 0n) start = process.hrtime.bigint();
}, { connection: connection(), prefix: cfg.prefix || 'bull', concurrency: cfg.concurrency || 50 });
worker.on('completed', () => {
  done++;
  if (done >= n) finish();
});
await finished;
const ms = Number(process.hrtime.bigint() - start) / 1e6;
emit({ n, ms });
await worker.close();
process.exit(0);
