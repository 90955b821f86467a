// Shared helpers of the harness: connection options from REDIS_URL, JSON I/O.
export function connection() {
  const u = new URL(process.env.REDIS_URL || 'redis://127.0.0.1:6379/0');
  const db = Number((u.pathname || '/0').slice(1) || 0);
  return {
    host: u.hostname,
    port: Number(u.port || 6379),
    db,
    password: u.password || undefined,
    maxRetriesPerRequest: null,
  };
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
