// Reports what Node.js BullMQ 6.7.0 sees of a queue. Config (argv[2] JSON):
// queue, prefix, ids (jobs to describe), idleMs (QueueEvents quiet period).
// QueueEvents reads the events stream from its start (lastEventId "0-0") and
// tallies every event up to the last entry present when it started. Prints one JSON line:
// {counts, events: {name: n}, perJob: {id: {event: n}}, jobs: {id: {...}}}.
import { Queue, QueueEvents } from 'bullmq';
import { client as newClient, closeConnections, connection, config, emit, sleep } from './lib.mjs';

const cfg = config();
const opts = { prefix: cfg.prefix || 'bull' };
const queue = new Queue(cfg.queue, { ...opts, connection: connection() });
const events = {};
const perJob = {};
const client = newClient();
const lastEntry = await client.xrevrange(`${opts.prefix}:${cfg.queue}:events`, '+', '-', 'COUNT', 1);
client.disconnect();
const lastId = lastEntry.length ? lastEntry[0][0] : null;
let seenLast = !lastId;
const qe = new QueueEvents(cfg.queue, { ...opts, connection: connection(), lastEventId: '0-0', autorun: false });
// Tally every stream event QueueEvents emits (not the per-job "<event>:<id>" echoes).
const internal = new Set(['error', 'ready', 'closing', 'closed', 'ioredis:close']);
const qeEmit = qe.emit.bind(qe);
qe.emit = (event, ...args) => {
  if (typeof event === 'string' && !event.includes(':') && !internal.has(event)) {
    const id = event === 'drained' ? args[0] : args[1];
    const jobId = event === 'drained' ? undefined : args[0] && args[0].jobId;
    events[event] = (events[event] || 0) + 1;
    if (jobId) {
      perJob[jobId] = perJob[jobId] || {};
      perJob[jobId][event] = (perJob[jobId][event] || 0) + 1;
    }
    if (id === lastId) seenLast = true;
  }
  return qeEmit(event, ...args);
};
qe.run().catch(() => {});
await qe.waitUntilReady();
// Read until the last entry present at start was seen (bounded), then a short quiet period.
const start = Date.now();
while (!seenLast && Date.now() - start < 30000) await sleep(20);
await sleep(cfg.idleMs || 200);
const counts = await queue.getJobCounts();
const jobs = {};
for (const id of cfg.ids || []) {
  const job = await queue.getJob(id);
  if (!job) { jobs[id] = null; continue; }
  jobs[id] = {
    state: await job.getState(),
    name: job.name,
    data: job.data,
    attemptsMade: job.attemptsMade,
    attemptsStarted: job.attemptsStarted,
    returnvalue: job.returnvalue,
    failedReason: job.failedReason,
    stacktrace: job.stacktrace,
    finishedOn: job.finishedOn,
    processedOn: job.processedOn,
    opts: job.opts,
  };
}
emit({ counts, events, perJob, jobs });
await qe.close();
await queue.close();
await closeConnections();
