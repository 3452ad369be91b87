package redisstream

import goredis "github.com/redis/go-redis/v9"

// refreshScript refreshes the lease on pending entries owned by this
// consumer: XCLAIM <id> JUSTID to itself, which resets the entry's idle
// time without counting a delivery. An idle argument other than -1 sets
// the idle time instead (XCLAIM … IDLE ms JUSTID), which is how a Nack
// makes an entry claimable after its delay. The ownership check makes the
// refresh safe: an entry another member has taken over is left alone and
// reported. An entry whose data was trimmed or deleted is not claimed:
// Redis (7.0 and later) drops it from the pending list, and it is
// reported too.
//
// KEYS[1] stream; ARGV[1] group, ARGV[2] consumer, then pairs id, idle-ms.
// Returns {IDs no longer pending for this consumer, IDs dropped as
// trimmed}.
var refreshScript = goredis.NewScript(`
local lost, gone = {}, {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if #p == 1 and p[1][2] == ARGV[2] then
    local c
    if ARGV[i+1] == '-1' then
      c = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'JUSTID')
    else
      c = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'IDLE', ARGV[i+1], 'JUSTID')
    end
    if #c == 0 then
      gone[#gone+1] = id
    end
  else
    lost[#lost+1] = id
  end
end
return {lost, gone}
`)

// claimScript takes over pending entries idle at least min-idle ms
// (XAUTOCLAIM) and returns them with their delivery counts, which
// XAUTOCLAIM itself does not report, in one round trip.
//
// KEYS[1] stream; ARGV group, consumer, min-idle-ms, cursor, count.
// Returns {next cursor, entries, counts, deleted IDs}.
var claimScript = goredis.NewScript(`
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
local counts = {}
for i, e in ipairs(r[2]) do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)
  if #p == 1 then counts[i] = p[1][4] else counts[i] = 1 end
end
return {r[1], r[2], counts, r[3] or {}}
`)

// renewScript extends a shard lease if this member still holds it.
// KEYS[1] lease; ARGV member, ttl-ms. Returns 1 if renewed, 0 if lost.
const renewScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`

// releaseScript deletes a shard lease if this member holds it.
const releaseScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`
