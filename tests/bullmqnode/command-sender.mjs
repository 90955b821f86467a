// Another service sending commands to the listing service (docs/integrations.md) with a plain
// ioredis client: each command a CloudEvent (JSON structured mode) on the stream
// <STREAM_PREFIX>:commands, signed with the integration's secret (hex HMAC-SHA256 of exactly
// the bytes of the entry's "event" field); then the replies read from
// <STREAM_PREFIX>:command-replies and matched on their correlationid. Run by
// tests/commands_test.go; also an example to copy.
//
// Argument (JSON): {prefix (STREAM_PREFIX, default "listing"), source (this service's
// CloudEvents source), workspaceId, integrationId, secret, commands: [{id, type, data}],
// timeoutMs (default 60000)}. Prints one JSON line per reply: {correlationid, type, data},
// then {"done": true, "reason": "replied" | "timeout"}. REDIS_URL (default
// redis://127.0.0.1:6379/0).
import { createHmac } from 'node:crypto';
import IORedis from 'ioredis';

const cfg = JSON.parse(process.argv[2] || '{}');
const prefix = cfg.prefix || 'listing';
const redis = new IORedis(process.env.REDIS_URL || 'redis://127.0.0.1:6379/0');
const emit = (o) => process.stdout.write(JSON.stringify(o) + '\n');

// send writes one command entry. The signature covers the exact bytes written in "event":
// serialize once, sign those bytes, send those bytes.
async function send({ id, type, data }) {
  const event = JSON.stringify({
    specversion: '1.0',
    id, // unique per source: the service runs a (source, id) once and answers repeats from its record
    type, // listing.<command>
    source: cfg.source,
    time: new Date().toISOString(),
    datacontenttype: 'application/json',
    data, // the HTTP endpoint's body plus the path's ids by name
    workspaceid: cfg.workspaceId,
    integrationid: cfg.integrationId,
  });
  const signature = createHmac('sha256', cfg.secret).update(event, 'utf8').digest('hex');
  await redis.xadd(`${prefix}:commands`, '*', 'event', event, 'signature', signature);
}

async function main() {
  const deadline = Date.now() + (cfg.timeoutMs ?? 60000);
  const waiting = new Set(cfg.commands.map((c) => c.id));
  // Replies are read from the last entry before sending on: none is missed.
  const last = await redis.xrevrange(`${prefix}:command-replies`, '+', '-', 'COUNT', 1);
  let cursor = last.length ? last[0][0] : '0';
  for (const c of cfg.commands) await send(c);
  while (waiting.size > 0) {
    if (Date.now() > deadline) return 'timeout';
    const res = await redis.xread('COUNT', 100, 'BLOCK', 200, 'STREAMS', `${prefix}:command-replies`, cursor);
    for (const [, entries] of res || []) {
      for (const [entryId, fields] of entries) {
        cursor = entryId;
        const reply = JSON.parse(fields[fields.indexOf('event') + 1]);
        // Replies are at least once: the first one per correlationid is the answer.
        if (!waiting.delete(reply.correlationid)) continue;
        emit({ correlationid: reply.correlationid, type: reply.type, data: reply.data });
      }
    }
  }
  return 'replied';
}

main()
  .then((reason) => emit({ done: true, reason }))
  .catch((e) => {
    process.stderr.write(String(e.stack || e) + '\n');
    process.exitCode = 1;
  })
  .finally(() => redis.quit());
