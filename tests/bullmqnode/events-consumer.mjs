// A consumer of the service's integration events (docs/events.md) with a plain ioredis
// client: a consumer group on the stream, each entry's one field "event" parsed as a
// CloudEvent (JSON structured mode), XACK once handled. Run by tests/events_test.go; also an
// example to copy.
//
// Argument (JSON): {stream, group, consumer, start ("0": from the oldest entry kept, "$": new
// ones only; used when the group is created), ack (acknowledge at most this many entries,
// default all: the rest stay pending, as after a crash), max (stop after this many entries),
// untilType and untilSubject (stop after an event of that type and subject), idleMs (stop
// when nothing arrives for that long, default 2000), timeoutMs (give up, default 60000)}.
// Prints one JSON line per entry: {entry, id, type, subject, workspaceid, time, data, acked},
// then {"done": true, "reason": …}. REDIS_URL (default redis://127.0.0.1:6379/0).
import IORedis from 'ioredis';

const cfg = JSON.parse(process.argv[2] || '{}');
const { stream, group, consumer } = cfg;
const ackLimit = cfg.ack ?? Infinity;
const max = cfg.max ?? Infinity;
const idleMs = cfg.idleMs ?? 2000;
const deadline = Date.now() + (cfg.timeoutMs ?? 60000);
const redis = new IORedis(process.env.REDIS_URL || 'redis://127.0.0.1:6379/0');

const emit = (o) => process.stdout.write(JSON.stringify(o) + '\n');

// parseCloudEvent reads an entry's fields ([name, value, …]) into a CloudEvent, refusing
// anything that is not one.
function parseCloudEvent(fields) {
  const i = fields.indexOf('event');
  if (i < 0 || i % 2 !== 0) throw new Error('the entry has no "event" field');
  const ev = JSON.parse(fields[i + 1]);
  for (const attr of ['id', 'source', 'type']) {
    if (typeof ev[attr] !== 'string' || ev[attr] === '') throw new Error(`CloudEvent without ${attr}`);
  }
  if (ev.specversion !== '1.0') throw new Error(`CloudEvent specversion ${ev.specversion}`);
  return ev;
}

async function main() {
  // The group is created once, by whichever consumer comes first; BUSYGROUP: it exists.
  try {
    await redis.xgroup('CREATE', stream, group, cfg.start ?? '0', 'MKSTREAM');
  } catch (e) {
    if (!String(e.message).includes('BUSYGROUP')) throw e;
  }
  let acked = 0;
  let read = 0;
  // First this consumer's own pending entries (read before, not acknowledged: a previous run
  // stopped before XACK), from id 0 onwards; then new entries (">").
  let cursor = '0';
  let idleSince = Date.now();
  for (;;) {
    if (Date.now() > deadline) return 'timeout';
    const res = await redis.xreadgroup('GROUP', group, consumer, 'COUNT', 10, 'BLOCK', 200, 'STREAMS', stream, cursor);
    const entries = res ? res[0][1] : [];
    if (entries.length === 0) {
      if (cursor !== '>') {
        cursor = '>';
        continue;
      }
      if (Date.now() - idleSince > idleMs) return 'idle';
      continue;
    }
    idleSince = Date.now();
    for (const [entry, fields] of entries) {
      if (cursor !== '>') cursor = entry; // pending entries: continue after this one
      if (fields === null) {
        // A pending entry trimmed from the stream before it was acknowledged: lost.
        await redis.xack(stream, group, entry);
        emit({ entry, lost: true });
        continue;
      }
      const ev = parseCloudEvent(fields);
      let ack = false;
      if (acked < ackLimit) {
        await redis.xack(stream, group, entry);
        acked++;
        ack = true;
      }
      read++;
      emit({ entry, id: ev.id, type: ev.type, subject: ev.subject, workspaceid: ev.workspaceid, time: ev.time, data: ev.data, acked: ack });
      if (cfg.untilType && ev.type === cfg.untilType && (!cfg.untilSubject || ev.subject === cfg.untilSubject)) return 'until';
      if (read >= max) return 'max';
    }
  }
}

try {
  const reason = await main();
  emit({ done: true, reason });
} finally {
  redis.disconnect();
}
