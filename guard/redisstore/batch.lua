-- otpguard: apply a batch of rule operations atomically (see guard.Op).
--
-- KEYS: per op, its counter key, then its lock and strike keys when the op
--       has a lockout. All keys of one call share one hash tag (one slot).
-- ARGV: [1] the number of ops, then NF fields per op (see below).
-- Time is the server's TIME in integer microseconds; every value stored is
-- an integer formatted with %d (Lua's tostring would round 16 digits), and
-- every key gets its TTL in the same step that writes it.
--
-- Reply: {batch allowed (1/0), now, then per op: allowed, remaining,
--         reset after (us), retry after (us), locked (1/0)}.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local NF = 13

local function fmt(n) return string.format('%d', n) end
local function ms(us)
  local m = math.ceil(us / 1000)
  if m < 1 then m = 1 end
  return m
end
local function pttl(key)
  local p = redis.call('PTTL', key)
  if p < 0 then return 0 end
  return p * 1000
end
local function mod(a, b)
  local r = a - math.floor(a / b) * b
  if r < 0 then r = r + b elseif r >= b then r = r - b end
  return r
end
local function num(v, default)
  if v then return tonumber(v) end
  return default
end

-- Each check returns {allowed, remaining, reset, retry} for taking cost
-- now, where remaining and reset assume the take is committed, and a
-- function that commits it.

local function fixed_window(op, cost)
  local v = redis.call('GET', op.key)
  local count = num(v, 0)
  local ttl = op.window
  if v then ttl = pttl(op.key) end
  local r = {count + cost <= op.limit, 0, ttl, 0}
  if r[1] then
    r[2] = op.limit - count - cost
  else
    r[2] = math.max(0, op.limit - count)
    r[4] = ttl
    if not v then r[3] = 0 end
  end
  return r, function(c)
    redis.call('SET', op.key, 0, 'PX', ms(op.window), 'NX')
    redis.call('INCRBY', op.key, c)
  end
end

local function sliding_window(op, cost)
  local h = redis.call('HMGET', op.key, 'w', 'c', 'p')
  local w, c, p = num(h[1], -1), num(h[2], 0), num(h[3], 0)
  local win = op.window
  local ws = now - mod(now, win)
  local cur, prev = 0, 0
  if w == ws then cur, prev = c, p elseif w == ws - win then prev = c end
  local elapsed = now - ws
  -- rounded up: the estimate errs towards denying
  local est = cur + math.ceil(prev * (win - elapsed) / win)
  local r = {est + cost <= op.limit, 0, 0, 0}
  -- the smallest time e (us, from a window's start) after which
  -- ceil(n * (win - e) / win) <= need
  local function decay(n, need)
    if need < 0 then return 2 * win end
    if n <= need then return 0 end
    local e = math.ceil(win - need * win / n)
    if e < 0 then e = 0 elseif e > win then e = win end
    return e
  end
  if r[1] then
    r[2] = op.limit - est - cost
    r[3] = ws + 2 * win - now
  else
    r[2] = math.max(0, op.limit - est)
    if cur + cost > op.limit then
      r[4] = (win - elapsed) + decay(cur, op.limit - cost)
    else
      r[4] = math.max(1, decay(prev, op.limit - cost - cur) - elapsed)
    end
    if cur > 0 then r[3] = ws + 2 * win - now elseif prev > 0 then r[3] = ws + win - now end
  end
  return r, function(n)
    redis.call('HSET', op.key, 'w', fmt(ws), 'c', fmt(cur + n), 'p', fmt(prev))
    redis.call('PEXPIRE', op.key, ms(ws + 2 * win - now))
  end
end

-- GCRA: one theoretical arrival time; burst = limit, refill limit/window.
local function token_bucket(op, cost)
  local T = math.ceil(op.window / op.limit)
  local tau = T * op.limit
  local tat = math.max(num(redis.call('GET', op.key), now), now)
  local newTat = tat + T * cost
  local allowAt = newTat - tau
  local r
  if now >= allowAt then
    r = {true, math.floor((now - allowAt) / T), newTat - now, 0}
  else
    r = {false, math.max(0, math.floor((now - tat + tau) / T)), tat - now, allowAt - now}
    if tat == now then r[3] = 0 end
  end
  return r, function(n)
    local nt = tat + T * n
    redis.call('SET', op.key, fmt(nt), 'PX', ms(nt - now))
  end, allowAt
end

local function zset_members(op, n)
  local m = {}
  for j = 1, n do m[j] = op.member .. ':' .. j end
  return m
end

-- A sorted set of entries scored by time. For sliding_log the score is
-- when the entry was added and it counts for window; for concurrency the
-- score is when the lease expires.
local function log_check(op, cost, from, live_for)
  local count = redis.call('ZCOUNT', op.key, '(' .. fmt(from), '+inf')
  local r = {count + cost <= op.limit, 0, 0, 0}
  local newest = redis.call('ZREVRANGEBYSCORE', op.key, '+inf', '(' .. fmt(from), 'WITHSCORES', 'LIMIT', 0, 1)
  if r[1] then
    r[2] = op.limit - count - cost
    r[3] = op.window
  else
    r[2] = math.max(0, op.limit - count)
    if newest[2] then r[3] = live_for(tonumber(newest[2])) end
    if cost > op.limit then
      r[4] = op.window
    else
      local e = redis.call('ZRANGEBYSCORE', op.key, '(' .. fmt(from), '+inf', 'WITHSCORES', 'LIMIT', count + cost - op.limit - 1, 1)
      r[4] = math.max(1, live_for(tonumber(e[2])))
    end
  end
  return r
end

local function sliding_log(op, cost)
  local from = now - op.window
  local r = log_check(op, cost, from, function(s) return s + op.window - now end)
  return r, function(n)
    redis.call('ZREMRANGEBYSCORE', op.key, '-inf', fmt(from))
    for _, m in ipairs(zset_members(op, n)) do redis.call('ZADD', op.key, fmt(now), m) end
    -- bounded by limit: forced failures never grow it past the newest limit
    redis.call('ZREMRANGEBYRANK', op.key, 0, -(op.limit + 1))
    redis.call('PEXPIRE', op.key, ms(op.window))
  end
end

local function concurrency(op, cost)
  local r = log_check(op, cost, now, function(s) return s - now end)
  return r, function(n)
    redis.call('ZREMRANGEBYSCORE', op.key, '-inf', fmt(now))
    for _, m in ipairs(zset_members(op, n)) do redis.call('ZADD', op.key, fmt(now + op.window), m) end
    redis.call('PEXPIRE', op.key, ms(op.window))
  end
end

local algorithms = {
  fixed_window = fixed_window, sliding_window = sliding_window, token_bucket = token_bucket,
  sliding_log = sliding_log, concurrency = concurrency,
}

-- check adds a lockout in force to the algorithm's answer.
local function check(op, cost)
  if op.lock then
    local lp = pttl(op.lock)
    if lp > 0 then return {false, 0, lp, lp, true}, function() end end
  end
  return algorithms[op.alg](op, cost)
end

local function refund(op)
  if op.alg == 'fixed_window' then
    if redis.call('EXISTS', op.key) == 1 and redis.call('DECRBY', op.key, op.cost) <= 0 then
      redis.call('DEL', op.key)
    end
  elseif op.alg == 'sliding_window' then
    local ws = op.at - mod(op.at, op.window)
    local w = num(redis.call('HGET', op.key, 'w'), -1)
    local field = nil
    if w == ws then field = 'c' elseif w == ws + op.window then field = 'p' end
    if field then
      local v = math.max(0, num(redis.call('HGET', op.key, field), 0) - op.cost)
      redis.call('HSET', op.key, field, fmt(v))
    end
  elseif op.alg == 'token_bucket' then
    local v = redis.call('GET', op.key)
    if v then
      local T = math.ceil(op.window / op.limit)
      local nt = tonumber(v) - T * op.cost
      if nt <= now then
        redis.call('DEL', op.key)
      else
        redis.call('SET', op.key, fmt(nt), 'PX', ms(nt - now))
      end
    end
  else
    redis.call('ZREM', op.key, unpack(zset_members(op, op.cost)))
  end
end

-- Parse the ops; the fields only some ops use are read when present.
local ops, k = {}, 1
for i = 1, tonumber(ARGV[1]) do
  local b = 1 + (i - 1) * NF
  local op = {
    kind = ARGV[b + 1], alg = ARGV[b + 2], limit = tonumber(ARGV[b + 3]), window = tonumber(ARGV[b + 4]),
    cost = tonumber(ARGV[b + 5]), enforce = ARGV[b + 6] == '1', member = ARGV[b + 11], key = KEYS[k],
  }
  k = k + 1
  if ARGV[b + 7] ~= '0' then
    op.lock_initial, op.lock_factor = tonumber(ARGV[b + 7]), tonumber(ARGV[b + 8])
    op.lock_max, op.lock_reset = tonumber(ARGV[b + 9]), tonumber(ARGV[b + 10])
    op.lock, op.strikes = KEYS[k], KEYS[k + 1]
    k = k + 2
  end
  if op.kind == 'refund' then op.at = tonumber(ARGV[b + 12]) end
  if op.kind == 'reserve' then op.max_wait = tonumber(ARGV[b + 13]) end
  ops[i] = op
end

-- Check every take and peek; the batch is allowed if no enforcing one denies.
local res, commits, allowed = {}, {}, true
for i, op in ipairs(ops) do
  if op.kind == 'take' or op.kind == 'peek' then
    res[i], commits[i] = check(op, op.cost)
    if op.enforce and not res[i][1] then allowed = false end
  end
end

-- Write.
for i, op in ipairs(ops) do
  if op.kind == 'take' or op.kind == 'peek' then
    local r = res[i]
    if op.kind == 'take' and allowed and r[1] then
      commits[i](op.cost)
    elseif r[1] then
      r[2] = r[2] + op.cost -- nothing taken: report what is left before
    end
  elseif op.kind == 'fail' then
    local _, commit = check(op, op.cost)
    commit(op.cost)
    res[i] = check(op, 1)
    if op.lock and not res[i][1] and not res[i][5] then
      local n = redis.call('INCR', op.strikes)
      redis.call('PEXPIRE', op.strikes, ms(op.lock_reset))
      local d = math.floor(math.min(op.lock_initial * op.lock_factor ^ (n - 1), op.lock_max))
      redis.call('SET', op.lock, '1', 'PX', ms(d))
      redis.call('DEL', op.key) -- the next attempts after the lockout count afresh
      res[i] = {false, 0, d, d, true}
    end
  elseif op.kind == 'clear' then
    redis.call('DEL', op.key)
    res[i] = {true, op.limit, 0, 0}
  elseif op.kind == 'release' or op.kind == 'refund' then
    refund(op)
    res[i] = {true, 0, 0, 0}
  elseif op.kind == 'reserve' then
    local r, commit, allow_at = token_bucket(op, op.cost)
    local wait = math.max(0, allow_at - now)
    if wait <= op.max_wait then
      commit(op.cost)
      res[i] = {true, math.max(0, r[2]), math.max(r[3], 0), wait}
    else
      res[i] = {false, 0, r[3], wait}
    end
  else
    return redis.error_reply('otpguard: unknown op kind ' .. tostring(op.kind))
  end
end

local out = {allowed and 1 or 0, now}
for i = 1, #ops do
  local r = res[i]
  local n = #out
  out[n + 1] = r[1] and 1 or 0
  out[n + 2] = math.floor(r[2])
  out[n + 3] = math.floor(r[3])
  out[n + 4] = math.floor(r[4])
  out[n + 5] = r[5] and 1 or 0
end
return out
