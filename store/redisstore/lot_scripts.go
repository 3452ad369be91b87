package redisstore

import goredis "github.com/redis/go-redis/v9"

// The scripts run atomically in Redis, so each lot operation is one
// transition of a key's state. Keys of one subscription share a hash tag,
// so that they live on one cluster slot. now() is the server's clock in
// milliseconds (TIME is allowed in scripts since Redis 5's effects
// replication, the default from 7).
//
// Per subscription (B is prefix + "{" + sub + "}:"):
//
//	B ver        string  the version: INCR on park, unpark and drop, each
//	                     also PUBLISHing sub on the lot's channel (lot_watch.go)
//	B parked     zset    parked keys, scored by park time (ms)
//	B k:<key>    hash    the key's state (see Lot's doc)
//	B m:<key>    zset    parked messages: score seq, member "<seq>:<ms>:<json>"
//	B i:<key>    set     IDs of the messages still parked, for duplicates
//	B audit      list    JSON audit records of dropped keys
//	B req        zset    keys with a pending release request, scored in request order
//	B reqseq     string  the request order's counter
const luaNow = `local function now() local t = redis.call('TIME') return t[1]*1000 + math.floor(t[2]/1000) end
`

// add appends a message to a parked key's lot: shared by park and append.
const luaAdd = `local function add(k, m, i, id, msg, ts)
  if id ~= '' then
    if redis.call('SISMEMBER', i, id) == 1 then return 3 end
    redis.call('SADD', i, id)
  end
  local seq = redis.call('HINCRBY', k, 'seq', 1)
  redis.call('HINCRBY', k, 'count', 1)
  redis.call('ZADD', m, seq, seq .. ':' .. ts .. ':' .. msg)
  return 2
end
`

// park: KEYS ver parked k m i; ARGV key id msg error class attempts failed_at_ms channel sub
var parkScript = goredis.NewScript(luaNow + luaAdd + `
local ts = now()
if redis.call('EXISTS', KEYS[3]) == 1 then
  return add(KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[3], ts)
end
redis.call('HSET', KEYS[3], 'first_id', ARGV[2], 'error', ARGV[4], 'class', ARGV[5], 'attempts', ARGV[6],
  'failed_at', ARGV[7], 'parked_at', ts, 'seq', 0, 'count', 0, 'failed_releases', 0)
redis.call('ZADD', KEYS[2], ts, ARGV[1])
redis.call('INCR', KEYS[1])
redis.call('PUBLISH', ARGV[#ARGV-1], ARGV[#ARGV])
add(KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[3], ts)
return 1
`)

// append: KEYS k m i; ARGV id msg
var appendScript = goredis.NewScript(luaNow + luaAdd + `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return add(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], now())
`)

// snapshot: KEYS ver parked; ARGV known → {version} or {version, keys...}
var snapshotScript = goredis.NewScript(`
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
if tostring(v) == ARGV[1] then return {v} end
local out = {v}
for _, key in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do out[#out+1] = key end
return out
`)

// lock: KEYS k; ARGV token lease_ms → 1 taken, 0 not parked, -1 busy
var lockScript = goredis.NewScript(luaNow + `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local ts = now()
local holder = redis.call('HGET', KEYS[1], 'lock')
local untl = tonumber(redis.call('HGET', KEYS[1], 'lock_until') or '0')
if holder and holder ~= '' and untl > ts then return -1 end
redis.call('HSET', KEYS[1], 'lock', ARGV[1], 'lock_until', ts + tonumber(ARGV[2]), 'lease', ARGV[2])
return 1
`)

// holds checks the lock token: shared by remove, unpark and unlock.
const luaHolds = `local function holds(k, token)
  return token ~= '' and redis.call('HGET', k, 'lock') == token
end
`

// remove: KEYS k m i; ARGV token seq → 1 ok, -1 lock lost
var removeScript = goredis.NewScript(luaNow + luaHolds + `
if not holds(KEYS[1], ARGV[1]) then return -1 end
local found = redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[2], ARGV[2])
if #found > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], ARGV[2], ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'count', -1)
  local rest = string.sub(found[1], string.find(found[1], ':', string.find(found[1], ':', 1, true) + 1, true) + 1)
  local id = cjson.decode(rest)['id']
  if id and id ~= '' then redis.call('SREM', KEYS[3], id) end
end
redis.call('HSET', KEYS[1], 'lock_until', now() + tonumber(redis.call('HGET', KEYS[1], 'lease') or '60000'))
return 1
`)

// unpark: KEYS ver parked k m i req; ARGV key token channel sub → 1 unparked, 0 not empty, -1 lock lost
var unparkScript = goredis.NewScript(luaHolds + `
if not holds(KEYS[3], ARGV[2]) then return -1 end
if redis.call('ZCARD', KEYS[4]) > 0 then return 0 end
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('INCR', KEYS[1])
redis.call('PUBLISH', ARGV[#ARGV-1], ARGV[#ARGV])
return 1
`)

// unlock: KEYS k req; ARGV token failed(0/1) error class attempts at_ms key → 1 ok, -1 lock lost
var unlockScript = goredis.NewScript(luaHolds + `
if not holds(KEYS[1], ARGV[1]) then return -1 end
redis.call('HDEL', KEYS[1], 'lock', 'lock_until', 'lease')
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'last_error', ARGV[3], 'last_class', ARGV[4], 'last_attempts', ARGV[5], 'last_failed_at', ARGV[6])
  redis.call('HINCRBY', KEYS[1], 'failed_releases', 1)
  redis.call('HDEL', KEYS[1], 'req_by', 'req_at')
  redis.call('ZREM', KEYS[2], ARGV[7])
end
return 1
`)

// drop: KEYS ver parked k m i audit req; ARGV key by reason channel sub →
// {1, now, state..., ids...}, {0} not parked, {-1} busy
var dropScript = goredis.NewScript(luaNow + `
if redis.call('EXISTS', KEYS[3]) == 0 then return {0} end
local ts = now()
local holder = redis.call('HGET', KEYS[3], 'lock')
local untl = tonumber(redis.call('HGET', KEYS[3], 'lock_until') or '0')
if holder and holder ~= '' and untl > ts then return {-1} end
local state = redis.call('HGETALL', KEYS[3])
local ids = {}
for _, member in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
  local rest = string.sub(member, string.find(member, ':', string.find(member, ':', 1, true) + 1, true) + 1)
  ids[#ids+1] = cjson.decode(rest)['id']
end
local h = {}
for j = 1, #state, 2 do h[state[j]] = state[j+1] end
h['key'] = ARGV[1]
h['by'] = ARGV[2]
h['reason'] = ARGV[3]
h['dropped_at'] = ts
h['count'] = #ids
h['lock'] = nil
h['lock_until'] = nil
h['lease'] = nil
h['req_by'] = nil
h['req_at'] = nil
local rec = cjson.encode({state = h, ids = ids})
redis.call('RPUSH', KEYS[6], rec)
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[7], ARGV[1])
redis.call('INCR', KEYS[1])
redis.call('PUBLISH', ARGV[#ARGV-1], ARGV[#ARGV])
return {1, rec}
`)

// request: KEYS k req reqseq; ARGV key by → 1 recorded (or pending already), 0 not parked
var requestScript = goredis.NewScript(luaNow + `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HEXISTS', KEYS[1], 'req_at') == 1 then return 1 end
redis.call('HSET', KEYS[1], 'req_by', ARGV[2], 'req_at', now())
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), ARGV[1])
return 1
`)
