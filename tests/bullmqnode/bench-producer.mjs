// Benchmark: Node.js BullMQ addBulk of n jobs in chunks. Config (argv[2]
// JSON): queue, prefix, n, chunk, opts. Prints {"n":..,"ms":..}.
import { Queue } from 'bullmq';
import { closeConnections, connection, config, emit } from './lib.mjs';

const cfg = config();
const queue = new Queue(cfg.queue, { connection: connection(), prefix: cfg.prefix || 'bull' });
await queue.waitUntilReady();
const n = cfg.n || 100000;
const chunk = cfg.chunk || 1000;
const data = cfg.data || { event_id: 'x', workspace_id: 'w', event_type: 'bench.job', payload: {} };
const start = process.hrtime.bigint();
for (let i = 0; i < n; i += chunk) {
  const jobs = [];
  for (let k = i; k < Math.min(i + chunk, n); k++) {
    const id = `${cfg.idPrefix || 'n'}-${k}`;
    jobs.push({ name: 'bench.job', data, opts: { ...(cfg.opts || {}), jobId: id, deduplication: cfg.dedupTtl ? { id, ttl: cfg.dedupTtl } : undefined } });
  }
  await queue.addBulk(jobs);
}
const ms = Number(process.hrtime.bigint() - start) / 1e6;
emit({ n, ms });
await queue.close();
await closeConnections();
