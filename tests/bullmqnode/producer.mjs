// Adds jobs with Node.js BullMQ 6.7.0. Config (argv[2] JSON): queue, prefix,
// mode "add" | "addBulk". Jobs on stdin: [{name, data, opts}]. Prints one JSON
// line: {"ids": [...]} with the id each call resolved with.
import { Queue } from 'bullmq';
import { closeConnections, connection, config, emit, readStdinJSON } from './lib.mjs';

const cfg = config();
const jobs = (await readStdinJSON()) || [];
const queue = new Queue(cfg.queue, { connection: connection(), prefix: cfg.prefix || 'bull' });
let ids = [];
if (cfg.mode === 'addBulk') {
  const added = await queue.addBulk(jobs.map(j => ({ name: j.name, data: j.data, opts: j.opts })));
  ids = added.map(j => j.id);
} else {
  for (const j of jobs) {
    const added = await queue.add(j.name, j.data, j.opts);
    ids.push(added.id);
  }
}
emit({ ids });
await queue.close();
await closeConnections();
