// Shared helpers of the harness: the Redis connection (REDIS_URL, or an ioredis Cluster of
// REDIS_CLUSTER_ADDRS), JSON I/O.
import IORedis from 'ioredis';

const clusters = [];

// connection returns what a BullMQ Queue, Worker or QueueEvents takes as `connection`: the
// options of REDIS_URL, or, when REDIS_CLUSTER_ADDRS ("host:port,…") is set, a new ioredis
// Cluster of those nodes (one per call: BullMQ neither duplicates nor closes an instance it
// is given; closeConnections closes them). On a cluster, queue names or the prefix must hold
// a hash tag ("{listing-publish}").
export function connection() {
  const u = new URL(process.env.REDIS_URL || 'redis://127.0.0.1:6379/0');
  const password = u.password || undefined;
  const addrs = process.env.REDIS_CLUSTER_ADDRS;
  if (addrs) {
    const nodes = addrs.split(',').map(a => {
      const i = a.lastIndexOf(':');
      return { host: a.slice(0, i), port: Number(a.slice(i + 1)) };
    });
    const c = new IORedis.Cluster(nodes, { redisOptions: { password, maxRetriesPerRequest: null } });
    clusters.push(c);
    return c;
  }
  const db = Number((u.pathname || '/0').slice(1) || 0);
  return {
    host: u.hostname,
    port: Number(u.port || 6379),
    db,
    password,
    maxRetriesPerRequest: null,
  };
}

// client returns a plain ioredis client of the same Redis (a Cluster on a cluster).
export function client() {
  const c = connection();
  return c instanceof IORedis.Cluster ? c : new IORedis(c);
}

// closeConnections closes the Cluster instances connection made (call it after closing the
// BullMQ objects, so the process can exit).
export async function closeConnections() {
  await Promise.all(clusters.splice(0).map(c => c.quit().catch(() => c.disconnect())));
}

export function config() {
  const raw = process.argv[2] || '{}';
  return JSON.parse(raw);
}

export function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

export async function readStdinJSON() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  const s = Buffer.concat(chunks).toString('utf8').trim();
  return s ? JSON.parse(s) : null;
}

export const sleep = ms => new Promise(r => setTimeout(r, ms));
