// Reports what Node.js BullMQ 6.7.0 sees of a queue. Config (argv[2] JSON):
// queue, prefix, ids (jobs to describe), idleMs (QueueEvents quiet period).
// QueueEvents reads the events stream from its start (lastEventId "0-0") and
// tallies events until none arrived for idleMs. Prints one JSON line:
// {counts, events: {name: n}, perJob: {id: {event: n}}, jobs: {id: {...}}}.
import { Queue, QueueEvents } from 'bullmq';
import { connection, config, emit, sleep } from './lib.mjs';

const cfg = config();
const opts = { connection: connection(), prefix: cfg.prefix || 'bull' };
const queue = new Queue(cfg.queue, opts);
const events = {};
const perJob = {};
let last = Date.now();
const qe = new QueueEvents(cfg.queue, { ...opts, lastEventId: '0-0', autorun: false });
const names = ['added', 'waiting', 'active', 'completed', 'failed', 'delayed', 'retries-exhausted',
  'stalled', 'duplicated', 'deduplicated', 'drained', 'removed'];
for (const n of names) {
  qe.on(n, args => {
    last = Date.now();
    events[n] = (events[n] || 0) + 1;
    const id = args && args.jobId;
    if (id) {
      perJob[id] = perJob[id] || {};
      perJob[id][n] = (perJob[id][n] || 0) + 1;
    }
  });
}
qe.run().catch(() => {});
await qe.waitUntilReady();
const idle = cfg.idleMs || 1000;
while (Date.now() - last < idle) await sleep(100);
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
