-- otpguard's Redis library: rate-limit decisions (batch) and verification
-- codes (code_put, code_check).
--
-- One source, two ways to run it (see script.go). Where the server has
-- functions (Redis >= 7, Valkey) it is loaded once per node as a FUNCTION
-- library, so the helpers below are built once, not on every call; the Go
-- store prepends `local ENTRY = nil` and registers each entry as
-- <VERSION>_<name>. Elsewhere (miniredis, older servers) it runs as one
-- EVALSHA script per entry, with `local ENTRY = '<name>'` prepended.
--
-- Time is the server's TIME in integer microseconds. Where a script may not
-- call TIME (ElastiCache Serverless refuses it), the client passes the
-- server's time instead, estimated from a TIME outside the script (see
-- clock.go): every entry's ARGV[1] is that time, or empty. Every value
-- stored is an integer (formatted with %d: tostring would round 16
-- digits), and every key gets its TTL in the same call that writes it.

-- The standard libraries are not reachable while a FUNCTION library loads
-- (Redis 7.0): these are bound on the first call (once per library load,
-- or once per EVALSHA call).
local floor, ceil, max, min
-- struct.pack and unpack, where the server's Lua has them (Redis, Valkey;
-- not miniredis): the batch's reply packed (see answer)
local spack, tunpack

local now -- the call's TIME, in microseconds
local NOWMS -- now in whole milliseconds (see fe_split)

local function fmt(n) return string.format('%d', n) end

-- ms converts a duration in microseconds to whole milliseconds, at least 1.
local function ms(us)
  local m = ceil(us / 1000)
  if m < 1 then return 1 end
  return m
end

local function mod(a, b)
  local r = a - floor(a / b) * b
  if r < 0 then r = r + b elseif r >= b then r = r - b end
  return r
end

-- clock sets now: the time the client passed (t, µs), else the server's
-- TIME. It is the first thing an entry does, so when it fails nothing has
-- been written and the client may call again with the time. It answers
-- false and an error for a passed time that is not whole µs in [0, 2^53)
-- (the store passes a formatted integer: anything else would leave now
-- nil, a fraction or out of range, and the answers with it), false alone
-- where the server refuses TIME.
local function clock(t)
  if not floor then
    floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
    tunpack = unpack
    -- (a global the server lacks is an error to read: asked under pcall)
    local ok, st = pcall(function() return struct end)
    if ok and type(st) == 'table' then spack = st.pack end
  end
  if t and t ~= '' then
    now = tonumber(t)
    if not now or now < 0 or now ~= floor(now) or now >= 9007199254740992 then return false, 'otpguard: bad time ' .. t end
    NOWMS = floor(now / 1000)
    return true
  end
  local ok, r = pcall(redis.call, 'TIME')
  if not ok or type(r) ~= 'table' then return false end
  now = tonumber(r[1]) * 1000000 + tonumber(r[2])
  NOWMS = floor(now / 1000)
  return true
end

local NOCLOCK = 'OTPGUARD_NOCLOCK scripts may not read TIME here: pass the time'

---------------------------------------------------------------------------
-- Hashes. Packed rules keep their state as fields of one hash per subject
-- (field = rule id .. slot letter); sliding windows and lockouts of rules
-- that are not packed use a hash of their own with the same helpers. Each
-- hash is read once per call (HGETALL) and written once (HSET/HDEL, then
-- PEXPIRE with the longest TTL any write asked for).

local H, W, T -- per call: read hashes, pending writes, TTL per written hash

local function hread(key)
  if not H then H = {} end
  local h = H[key]
  if not h then
    h = {}
    local flat = redis.call('HGETALL', key)
    for i = 1, #flat, 2 do h[flat[i]] = tonumber(flat[i + 1]) end
    H[key] = h
  end
  return h
end

local function hget(key, field) return hread(key)[field] end

-- hput stages field = v (false deletes it) and asks for a TTL of ttl µs.
local function hput(key, field, v, ttl)
  hread(key)[field] = v or nil
  if not W then W, T = {}, {} end
  local w = W[key]
  if not w then w = {}; W[key] = w end
  w[field] = v
  if ttl and ttl > (T[key] or 0) then T[key] = ttl end
end

local function hflush()
  if not W then return end
  for key, w in pairs(W) do
    local set, del = {}, {}
    for f, v in pairs(w) do
      if v then set[#set + 1] = f; set[#set + 1] = fmt(v) else del[#del + 1] = f end
    end
    if #del > 0 then redis.call('HDEL', key, unpack(del)) end
    if #set > 0 then
      redis.call('HSET', key, unpack(set))
      redis.call('PEXPIRE', key, ms(T[key] or 1))
    end
  end
end

---------------------------------------------------------------------------
-- Algorithms. Each has
--   check(op, cost) -> allowed, remaining, reset, retry   (all µs; remaining
--                      as if cost were taken, when allowed)
--   commit(op, n)   -- take n units (state read by check is on op)
--   refund(op)      -- give back op.cost units taken at op.at (0: now)
--   clear(op)       -- forget the counter

local A = {}

-- FW_SLACK: see A.fw.refund (µs; guard.FixedWindowSlack).
local FW_SLACK = 1000000

-- REVOKE_SLACK: see batch's 'D' (µs).
local REVOKE_SLACK = 60000000

-- A fixed window on its own key whose spec is 'fe' (see spec) keeps its
-- window's end in the key's value beside the count: count + M * (the
-- end's ms mod P), P the least power of two above the window's ms plus
-- a minute's (clocks up to a minute apart never wrap an end into the
-- window), M = 2^53 / P, so every value is exact in Lua's numbers
-- (the spec is 'fe' only while twice its limit is below M: a take of at
-- most the limit never carries into the end). INCRBY then answers the
-- count and the end at once, where the count alone needed a PTTL.

-- fe_split returns the count and the window's end (µs) of value v of
-- key: the end it holds when that lies within the window from now, else
-- (the key's last millisecond, or clocks further apart than the slack)
-- as PTTL says, 0 when the window is over; and whether PTTL said it.
local function fe_split(sp, key, v)
  local c = v % sp.M
  local d = ((v - c) / sp.M - NOWMS) % sp.P
  if d >= 1 and d <= sp.pxn then return c, (NOWMS + d) * 1000, false end
  local p = redis.call('PTTL', key)
  if p > 0 then return c, now + p * 1000, true end
  return c, 0, true
end

-- fe_exact is a denied window's end as the key's TTL has it: the end
-- its value holds is reckoned from the clock of the call that started
-- it, which may be a client's estimate of the server's (a passed time),
-- and a client that waits a denial's retry-after must find the window
-- over in Redis. 0: the window is over.
local function fe_exact(key)
  local p = redis.call('PTTL', key)
  if p > 0 then return now + p * 1000 end
  return 0 -- (the key's last millisecond: its window is over, as fe_split's PTTL has it)
end

-- fe_denied gives a denied op's state, as A.fw.read left it, the end
-- its key's TTL has (fe_exact), unless PTTL said it already: 0, and
-- nothing counted, when the window is over.
local function fe_denied(op)
  if op.e > 0 and not op.x then
    op.e = fe_exact(op.key)
    if op.e == 0 then op.c = 0 end
  end
end

-- fe_value is the value of count c in a window starting now.
local function fe_value(sp, c) return fmt(c + sp.M * ((NOWMS + sp.pxn) % sp.P)) end

-- fixed_window: a count and the window's end; the window starts at the
-- first hit. Packed: fields <id>c, <id>e. Own key: the count, PX the
-- window ('fe': the count and the end, see fe_split).
A.fw = {
  read = function(op)
    if op.packed then
      local e = hget(op.key, op.f .. 'e') or 0
      if e > now then op.c, op.e = hget(op.key, op.f .. 'c') or 0, e else op.c, op.e = 0, 0 end
    elseif op.M then
      local v = redis.call('GET', op.key)
      op.c, op.e, op.x = 0, 0, true
      if v then
        local c, e, x = fe_split(op, op.key, tonumber(v))
        if e > 0 then op.c, op.e, op.x = c, e, x end
      end
    else
      local p = redis.call('PTTL', op.key)
      if p > 0 then
        op.c, op.e = tonumber(redis.call('GET', op.key)) or 0, now + p * 1000
      else
        op.c, op.e = 0, 0
      end
    end
  end,
  check = function(op, cost)
    A.fw.read(op)
    if op.M and op.c + cost > op.limit then fe_denied(op) end
    -- A window never ends more than one window from now, however the
    -- clocks of the calls that started it and of this one are set (the
    -- passed clock of concurrent callers, see clock)
    local left = min(op.e - now, op.window)
    local reset = op.window
    if op.e > 0 then reset = left end
    if op.c + cost <= op.limit then return true, op.limit - op.c - cost, reset, 0 end
    if op.e == 0 then reset = 0 end
    return false, max(0, op.limit - op.c), reset, op.e > 0 and left or op.window
  end,
  commit = function(op, n)
    if op.packed then
      if op.e == 0 then op.e = now + op.window end
      hput(op.key, op.f .. 'c', op.c + n, op.ttl)
      hput(op.key, op.f .. 'e', op.e, op.ttl)
    elseif op.e == 0 then
      -- (a take of nothing starts no window: a count of 0 on its own key
      -- is read as no window by the next take, which starts one)
      if not op.M then redis.call('SET', op.key, n, 'PX', op.pxms) elseif n > 0 then redis.call('SET', op.key, fe_value(op, n), 'PX', op.pxms) end
    else
      redis.call('INCRBY', op.key, n)
    end
    op.c = op.c + n
  end,
  refund = function(op)
    A.fw.read(op)
    -- a take of an earlier window is gone with it. The window's start is
    -- reckoned from this call's clock and the key's TTL (whole ms), the
    -- take's time from its own call's: on a loaded server, or with the
    -- time passed by clients whose estimates differ, the two are apart by
    -- more than the TTL's ms. A take named up to FW_SLACK before the start
    -- is the window's own (only a window started within FW_SLACK after a
    -- take is mistaken for it: one unit given back early).
    if op.e == 0 or (op.at > 0 and op.at < op.e - op.window - FW_SLACK) then return end
    -- back to zero, the window ends: the next hit starts one
    local c = max(0, op.c - op.cost)
    if op.packed then
      if c == 0 then A.fw.clear(op) else hput(op.key, op.f .. 'c', c, op.ttl) end
    elseif c == 0 then
      redis.call('DEL', op.key)
    else
      redis.call('DECRBY', op.key, op.c - c)
    end
  end,
  clear = function(op)
    if op.packed then
      hput(op.key, op.f .. 'c', false); hput(op.key, op.f .. 'e', false)
    else
      redis.call('DEL', op.key)
    end
  end,
}

-- A take of a fixed window on its own key runs take-first: INCRBY, then
-- the TTL (PEXPIRE when the key is new), two commands where check then
-- commit needs three (PTTL, GET, INCRBY); where the value holds the end
-- ('fe', fe_split), INCRBY alone (SET with the end when the key is new).
-- A take that goes over, or that a later rule's denial makes moot, is
-- given back in the same call (A.fw.undo), so nothing outside the call
-- ever sees it.
local function fw_take(op, cost)
  -- (a number argument is formatted on every call: one unit is passed as
  -- a string, and the window's milliseconds are formatted once, with the
  -- spec; INCR and DECR are not among the stack's cache user's commands)
  if op.M and cost > op.limit then
    -- never allowed, and its INCRBY could carry into the end: answered
    -- from the state as it stands, as the take given back would be
    A.fw.read(op)
    fe_denied(op)
    op.fresh, op.held = op.e == 0, 0
    if op.fresh then return false, op.limit, 0, op.window end
    return false, max(0, op.limit - op.c), op.e - now, op.e - now
  end
  local c
  if cost == 1 then c = redis.call('INCRBY', op.key, '1') else c = redis.call('INCRBY', op.key, cost) end
  op.fresh = c == cost
  if op.fresh then
    if op.M then redis.call('SET', op.key, fe_value(op, cost), 'PX', op.pxms) else redis.call('PEXPIRE', op.key, op.pxms) end
    op.e = now + op.window
  elseif op.M then
    local e, x
    c, e, x = fe_split(op, op.key, c)
    if e > 0 and c > op.limit and not x then e = fe_exact(op.key) end
    if e > 0 then
      op.e = e
    else
      -- its window is over: this take starts the next
      redis.call('SET', op.key, fe_value(op, cost), 'PX', op.pxms)
      c, op.fresh, op.e = cost, true, now + op.window
    end
  else
    local p = redis.call('PTTL', op.key)
    if p > 0 then op.e = now + p * 1000
    elseif p == 0 then
      -- the key's last millisecond (Redis drops a key once the time is
      -- past its expiry's millisecond, and PTTL answers 0 in it), or a
      -- key past its expiry that the script still sees (Redis 7.0 expires
      -- keys as of the script's start; PTTL reads the clock): its window
      -- is over, as A.fw.read has it, and this take starts the next.
      -- (Taken for no TTL, it was given a whole new window with the old
      -- count: a client that waited its retry-after to the millisecond
      -- was denied for another window.)
      redis.call('SET', op.key, cost, 'PX', op.pxms)
      c, op.fresh, op.e = cost, true, now + op.window
    else
      -- no TTL cannot happen (every write sets one); if it did, the
      -- window starts now
      redis.call('PEXPIRE', op.key, op.pxms)
      op.e = now + op.window
    end
  end
  op.c = c - cost -- the count before this take, as read would see it
  if c <= op.limit then
    op.held = cost
    return true, op.limit - c, op.e - now, 0
  end
  A.fw.undo(op, cost)
  if op.fresh then return false, max(0, op.limit - op.c), 0, op.window end
  return false, max(0, op.limit - op.c), op.e - now, op.e - now
end

function A.fw.undo(op, n)
  if op.fresh then
    redis.call('DEL', op.key)
    op.e = 0 -- the window it would have started is gone with it
  elseif n == 1 then
    redis.call('DECRBY', op.key, '1')
  else
    redis.call('DECRBY', op.key, n)
  end
  op.held = 0
end

-- token_bucket (GCRA): one theoretical arrival time; burst = limit, one
-- unit back every window/limit. Packed: field <id>t. Own key: the TAT.
local function tb_period(op) return ceil(op.window / op.limit) end
A.tb = {
  read = function(op)
    local v
    if op.packed then v = hget(op.key, op.f .. 't') else v = tonumber(redis.call('GET', op.key)) end
    op.tat = max(v or now, now)
  end,
  check = function(op, cost)
    A.tb.read(op)
    local T, tau = tb_period(op), tb_period(op) * op.limit
    local allow_at = op.tat + T * cost - tau
    op.allow_at = allow_at
    if now >= allow_at then return true, floor((now - allow_at) / T), op.tat + T * cost - now, 0 end
    local reset = op.tat - now
    return false, max(0, floor((now - op.tat + tau) / T)), reset, allow_at - now
  end,
  write = function(op, tat)
    if op.packed then
      if tat <= now then hput(op.key, op.f .. 't', false) else hput(op.key, op.f .. 't', tat, op.ttl) end
    elseif tat <= now then
      redis.call('DEL', op.key)
    else
      redis.call('SET', op.key, fmt(tat), 'PX', ms(tat - now))
    end
  end,
  commit = function(op, n)
    op.tat = op.tat + tb_period(op) * n
    A.tb.write(op, op.tat)
  end,
  refund = function(op)
    A.tb.read(op)
    A.tb.write(op, op.tat - tb_period(op) * op.cost)
  end,
  clear = function(op) A.tb.write(op, 0) end,
}

-- sliding_window: two counters of windows aligned on multiples of the
-- window; the previous one weighted by the part still inside the sliding
-- window, rounded up (errs towards denying). Fields <id>w (the window's
-- number: its start / window),
-- <id>c, <id>p; the rule's own hash uses the bare letters.
A.sw = {
  read = function(op)
    local win = op.window
    op.ws = now - mod(now, win)
    -- w is the window's number (its start / window): a smaller integer
    -- than the start in µs, so fewer bytes in the hash
    local w = hget(op.key, op.f .. 'w') or -1
    local c = hget(op.key, op.f .. 'c') or 0
    local idx = op.ws / win
    op.cur, op.prev = 0, 0
    if w == idx then op.cur, op.prev = c, hget(op.key, op.f .. 'p') or 0
    elseif w == idx - 1 then op.prev = c end
    if op.elastic then
      local v = hget(op.key, op.f .. 'v') or 0
      op.vc, op.vp = 0, 0
      if w == idx then op.vc, op.vp = v, hget(op.key, op.f .. 'q') or 0
      elseif w == idx - 1 then op.vp = v end
    end
  end,
  -- limit is the rule's limit, or for an elastic rule (its successes
  -- counted in v and q) max(limit, ratio x the successes in the sliding
  -- window, weighted as the count is)
  limit = function(op)
    if not op.elastic then return op.limit end
    local win = op.window
    local s = op.vc + op.vp * (win - (now - op.ws)) / win
    return max(op.limit, floor(op.elastic * s))
  end,
  check = function(op, cost)
    A.sw.read(op)
    local win, limit = op.window, A.sw.limit(op)
    local elapsed = now - op.ws
    local est = op.cur + ceil(op.prev * (win - elapsed) / win)
    -- the smallest e (µs from a window's start) after which
    -- ceil(n * (win - e) / win) <= need
    local function decay(n, need)
      if need < 0 then return 2 * win end
      if n <= need then return 0 end
      local e = ceil(win - need * win / n)
      if e < 0 then e = 0 elseif e > win then e = win end
      return e
    end
    if est + cost <= limit then return true, limit - est - cost, op.ws + 2 * win - now, 0 end
    local reset, retry = 0, 0
    if op.cur + cost > limit then
      retry = (win - elapsed) + decay(op.cur, limit - cost)
    else
      retry = max(1, decay(op.prev, limit - cost - op.cur) - elapsed)
    end
    if op.cur > 0 then reset = op.ws + 2 * win - now elseif op.prev > 0 then reset = op.ws + win - now end
    return false, max(0, limit - est), reset, retry
  end,
  put = function(op, cur)
    local ttl = op.ttl
    if not op.packed then ttl = op.ws + 2 * op.window - now end
    hput(op.key, op.f .. 'w', op.ws / op.window, ttl)
    hput(op.key, op.f .. 'c', cur, ttl)
    hput(op.key, op.f .. 'p', op.prev, ttl)
    if op.elastic then
      hput(op.key, op.f .. 'v', op.vc, ttl)
      hput(op.key, op.f .. 'q', op.vp, ttl)
    end
  end,
  commit = function(op, n)
    op.cur = op.cur + n
    A.sw.put(op, op.cur)
  end,
  refund = function(op)
    A.sw.read(op)
    local at = op.at
    if at == 0 then at = now end
    local ws = at - mod(at, op.window)
    local hit = true
    if ws == op.ws then
      op.cur = max(0, op.cur - op.cost)
    elseif ws == op.ws - op.window then
      op.prev = max(0, op.prev - op.cost)
    else
      hit = false
    end
    -- a success (a refund, not a cancel) counts now among an elastic
    -- rule's verified units
    if op.elastic and op.kind == 'r' then op.vc, hit = op.vc + op.cost, true end
    if hit then A.sw.put(op, op.cur) end
  end,
  clear = function(op)
    for _, s in ipairs({'w', 'c', 'p', 'v', 'q'}) do hput(op.key, op.f .. s, false) end
  end,
}

-- ratio: attempts and failures over a sliding window, as sliding_window
-- counts (two windows aligned on multiples of the window, the previous
-- one weighted by the part still inside), in floating point. Fields <id>w
-- (the window's number), <id>a, <id>f (this window's attempts and
-- failures), <id>b, <id>g (the previous window's). A take counts an
-- attempt and a failure; a refund (a success) gives back the failure; a
-- cancel gives back both. It denies while attempts >= min and failures
-- >= limit% of attempts; remaining is how many more failed attempts it
-- admits.
local function rt_room(a, f, pct, mn, cost)
  -- the k >= 0 admitted are those with a + k < mn or f + k < r (a + k),
  -- r = pct / 100: k < mn - a, or k < (pct a - 100 f) / (100 - pct). In
  -- whole percents, not r = 0.8 and 1 - r = 0.19999999999999996: at
  -- integer points (5 admitted) that gave 5.000000000000001, one too many.
  local x = max(mn - a, (pct * a - 100 * f) / (100 - pct))
  return max(0, ceil(x) - cost), x > cost - 1
end

-- rt_retry is when an attempt is admitted again (µs from now): the
-- weight of the previous window falls until one of the two conditions
-- lifts; failing that, this window's counts decay in the next one until
-- there are fewer than min attempts. Each threshold on the weight is a
-- fraction n / d (d > 0), compared and scaled in whole numbers, so that a
-- threshold that falls on a microsecond is not missed by a rounding.
local function rt_retry(op, elapsed)
  local win, pct, mn = op.window, op.limit, op.min
  local left = win - elapsed -- the weight of the previous window is left / win
  -- n / d: the weight below which an attempt is admitted; none yet
  local n, d = -1, 1
  if op.pa > 0 then n, d = mn - op.ca, op.pa end
  local e = pct * op.pa - 100 * op.pf
  if e < 0 then
    -- admitted when the weight < (100 cf - pct ca) / e, e < 0
    local n2, d2 = pct * op.ca - 100 * op.cf, -e
    if n2 * d > n * d2 then n, d = n2, d2 end
  end
  if n > 0 and n * win <= d * left then
    -- the first µs at which the weight is below n / d
    return left - ceil(n * win / d) + 1
  end
  if op.ca <= 0 then return left end
  -- in the next window, fewer than mn attempts once its weight < mn / ca
  local t = left + win - ceil(mn * win / op.ca) + 1
  return min(t, 2 * win - elapsed)
end

A.rt = {
  read = function(op)
    local win = op.window
    op.ws = now - mod(now, win)
    local w = hget(op.key, op.f .. 'w') or -1
    local idx = op.ws / win
    op.ca, op.cf, op.pa, op.pf = 0, 0, 0, 0
    if w == idx then
      op.ca, op.cf = hget(op.key, op.f .. 'a') or 0, hget(op.key, op.f .. 'f') or 0
      op.pa, op.pf = hget(op.key, op.f .. 'b') or 0, hget(op.key, op.f .. 'g') or 0
    elseif w == idx - 1 then
      op.pa, op.pf = hget(op.key, op.f .. 'a') or 0, hget(op.key, op.f .. 'f') or 0
    end
  end,
  check = function(op, cost)
    A.rt.read(op)
    local win = op.window
    local elapsed = now - op.ws
    -- the previous window weighted by (win - elapsed) / win, one rounding
    local a, f = op.ca + op.pa * (win - elapsed) / win, op.cf + op.pf * (win - elapsed) / win
    local rem, ok = rt_room(a, f, op.limit, op.min, cost)
    if ok then return true, rem, op.ws + 2 * win - now, 0 end
    local reset = 0
    if op.ca > 0 then reset = op.ws + 2 * win - now elseif op.pa > 0 then reset = op.ws + win - now end
    return false, 0, reset, rt_retry(op, elapsed)
  end,
  put = function(op)
    local ttl = op.ttl
    if not op.packed then ttl = op.ws + 2 * op.window - now end
    hput(op.key, op.f .. 'w', op.ws / op.window, ttl)
    hput(op.key, op.f .. 'a', op.ca, ttl)
    hput(op.key, op.f .. 'f', op.cf, ttl)
    hput(op.key, op.f .. 'b', op.pa, ttl)
    hput(op.key, op.f .. 'g', op.pf, ttl)
  end,
  commit = function(op, n)
    op.ca, op.cf = op.ca + n, op.cf + n
    A.rt.put(op)
  end,
  refund = function(op)
    A.rt.read(op)
    local at = op.at
    if at == 0 then at = now end
    local ws = at - mod(at, op.window)
    local both = op.kind ~= 'r' -- a cancel: the attempt never happened
    if ws == op.ws then
      op.cf = max(0, op.cf - op.cost)
      if both then op.ca = max(0, op.ca - op.cost) end
    elseif ws == op.ws - op.window then
      op.pf = max(0, op.pf - op.cost)
      if both then op.pa = max(0, op.pa - op.cost) end
    else
      return
    end
    A.rt.put(op)
  end,
  clear = function(op)
    for _, s in ipairs({'w', 'a', 'f', 'b', 'g'}) do hput(op.key, op.f .. s, false) end
  end,
}

-- The set algorithms keep a sorted set at the rule's own key.
--   sliding_log: entries scored by when they were added; exact "limit in
--     any window", never more than limit entries.
--   concurrency: leases scored by when they expire.
--   distinct: the keyed hashes of the distinct values seen in the window,
--     scored by when each was last seen; a value already seen costs
--     nothing; a new one is admitted while fewer than limit are held,
--     never more than keep entries (keep > limit only where a challenge's
--     proof committed more: see 'k').
local function zcheck(op, cost, from, live_for)
  local count = redis.call('ZCOUNT', op.key, '(' .. fmt(from), '+inf')
  op.count = count
  if count + cost <= op.limit then return true, op.limit - count - cost, op.window, 0 end
  local reset, retry = 0, op.window
  local newest = redis.call('ZREVRANGEBYSCORE', op.key, '+inf', '(' .. fmt(from), 'WITHSCORES', 'LIMIT', 0, 1)
  if newest[2] then reset = live_for(tonumber(newest[2])) end
  if cost <= op.limit then
    local e = redis.call('ZRANGEBYSCORE', op.key, '(' .. fmt(from), '+inf', 'WITHSCORES', 'LIMIT', count + cost - op.limit - 1, 1)
    retry = max(1, live_for(tonumber(e[2])))
  end
  return false, max(0, op.limit - count), reset, retry
end

local function members(op, n)
  local m = {}
  for j = 1, n do m[j] = op.member .. ':' .. j end
  return m
end

local function zadd(op, score, list)
  local args = {}
  for _, m in ipairs(list) do args[#args + 1] = fmt(score); args[#args + 1] = m end
  redis.call('ZADD', op.key, unpack(args))
end

local function zclear(op) redis.call('DEL', op.key) end

A.sl = {
  check = function(op, cost)
    return zcheck(op, cost, now - op.window, function(s) return s + op.window - now end)
  end,
  commit = function(op, n)
    redis.call('ZREMRANGEBYSCORE', op.key, '-inf', fmt(now - op.window))
    zadd(op, now, members(op, n))
    -- bounded by limit
    redis.call('ZREMRANGEBYRANK', op.key, 0, -(op.limit + 1))
    redis.call('PEXPIRE', op.key, op.pxms)
  end,
  refund = function(op) redis.call('ZREM', op.key, unpack(members(op, op.cost))) end,
  clear = zclear,
}

A.cc = {
  check = function(op, cost)
    return zcheck(op, cost, now, function(s) return s - now end)
  end,
  commit = function(op, n)
    redis.call('ZREMRANGEBYSCORE', op.key, '-inf', fmt(now))
    zadd(op, now + op.window, members(op, n))
    redis.call('PEXPIRE', op.key, op.pxms)
  end,
  refund = function(op) redis.call('ZREM', op.key, unpack(members(op, op.cost))) end,
  clear = zclear,
}

A.ds = {
  check = function(op, cost)
    local from = now - op.window
    local seen = tonumber(redis.call('ZSCORE', op.key, op.member) or 0)
    if seen > from then
      op.seen = true
      local count = redis.call('ZCOUNT', op.key, '(' .. fmt(from), '+inf')
      return true, max(0, op.limit - count), op.window, 0
    end
    return zcheck(op, 1, from, function(s) return s + op.window - now end)
  end,
  commit = function(op)
    -- a value seen again is refreshed: "seen in the window" is last seen
    redis.call('ZREMRANGEBYSCORE', op.key, '-inf', fmt(now - op.window))
    redis.call('ZADD', op.key, fmt(now), op.member)
    redis.call('ZREMRANGEBYRANK', op.key, 0, -(op.keep + 1))
    redis.call('PEXPIRE', op.key, op.pxms)
  end,
  refund = function(op) redis.call('ZREM', op.key, op.member) end,
  clear = zclear,
}

---------------------------------------------------------------------------
-- Lockouts. Slots: l (locked until, µs), s (strikes), x (strikes forgotten
-- at, µs); in the packed hash as <id>l..., else in the rule's own lockout
-- hash (its lock key) as l, s, x.

local function lock_until(op)
  if not op.lock then return 0 end
  local l = hget(op.lkey, op.lf .. 'l') or 0
  if l > now then return l end
  return 0
end

-- next_lockout is the number and the length of the subject's next
-- lockout: the n-th within lockout.reset lasts initial * factor^(n-1), at
-- most max.
local function next_lockout(op)
  local initial, factor, lmax = op.lock[1], op.lock[2], op.lock[3]
  local n = 1
  if (hget(op.lkey, op.lf .. 'x') or 0) > now then n = (hget(op.lkey, op.lf .. 's') or 0) + 1 end
  return n, floor(min(initial * factor ^ (n - 1), lmax))
end

-- again reports a failure within reset of an earlier lockout: it locks
-- again at once, for the next duration (a lockout ending does not hand
-- out a fresh budget: an attacker gets one try per lockout).
local function again(op)
  return (hget(op.lkey, op.lf .. 's') or 0) > 0 and (hget(op.lkey, op.lf .. 'x') or 0) > now
end

-- strike starts a lockout.
local function strike(op)
  local reset = op.lock[4]
  local n, d = next_lockout(op)
  local ttl = reset
  if op.packed then ttl = op.ttl end
  hput(op.lkey, op.lf .. 'l', now + d, ttl)
  hput(op.lkey, op.lf .. 's', n, ttl)
  hput(op.lkey, op.lf .. 'x', now + reset, ttl)
  return d
end

local function unlock(op)
  if not op.lock then return end
  for _, s in ipairs({'l', 's', 'x'}) do hput(op.lkey, op.lf .. s, false) end
end

---------------------------------------------------------------------------
-- batch: KEYS per op: its state key (the packed hash, or its own key),
-- then its lockout hash when it has a lockout and is not packed. ARGV:
-- [1] the time or empty (see clock), [2] the number of ops, then NA
-- fields per op, named below (the Go side writes them in this order: see
-- args.go); or [2] 't' when every op is a plain take (DYN 't'), then
-- each op's SPEC alone.

local SPEC, DYN = 1, 2
local NA = 2

-- A rule's unchanging arguments come as one string,
-- "alg|limit|window|enforce|field|ttl|lock|min|elastic|challenge|keep"
-- (lock: "initial factor max reset" or empty; min: the ratio's; elastic:
-- the ratio of successes an elastic limit follows, or empty; challenge: 1
-- when the rule's denial is a challenge whose take waits for the proof, 2
-- when it takes at once (a failure-counting rule), else empty; keep: how
-- many values a distinct set keeps, or empty for limit), parsed once: a
-- FUNCTION library keeps SPECS from call to call (bounded), a script call
-- parses each spec it sees once.
local SPECS, NSPECS = {}, 0

local function spec(s)
  local sp = SPECS[s]
  if sp then return sp end
  local alg, limit, window, enforce, f, ttl, lock, mn, el, ch, kp = string.match(s, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  -- the window: whole µs, below 2^53 (formatted once as PEXPIRE's
  -- milliseconds: an infinite or huge one would format negative)
  local w = tonumber(window)
  if not w or w < 0 or w ~= floor(w) or w >= 9007199254740992 then return nil, 'otpguard: bad spec ' .. tostring(s) end
  local fe = alg == 'fe' -- a fixed window with its end in its key's value (fe_split)
  if fe then alg = 'fw' end
  sp = {alg = alg, limit = tonumber(limit), window = tonumber(window), enforce = enforce == '1', f = f,
    ttl = tonumber(ttl), packed = f ~= '', min = tonumber(mn) or 0, elastic = tonumber(el), challenge = ch ~= '',
    challenge_takes = ch == '2'}
  sp.keep = max(sp.limit, tonumber(kp) or 0)
  sp.pxms = fmt(ms(sp.window)) -- the window as PEXPIRE's argument
  if fe then
    -- P and M as args.go's endInValue has them; a spec they do not fit
    -- is refused (its values would not be exact)
    sp.pxn, sp.P = ms(sp.window), 1024
    while sp.P < sp.pxn + 60001 do sp.P = sp.P * 2 end
    sp.M = 9007199254740992 / sp.P
    if sp.packed or lock ~= '' or ch ~= '' or sp.P > 34359738368 or not sp.limit or sp.limit < 0 or 2 * sp.limit >= sp.M then
      return nil, 'otpguard: bad spec ' .. tostring(s)
    end
  end
  if lock ~= '' then
    local l, j = {}, 1
    for v in string.gmatch(lock, '%S+') do l[j] = tonumber(v); j = j + 1 end
    sp.lock = l
  end
  -- an op reads its rule's fields through this metatable: a call builds
  -- a small table per op, not a copy of the spec
  sp.mt = {__index = sp}
  -- a take of this rule runs take-first (fw_take)
  sp.takefirst = alg == 'fw' and not sp.packed and not sp.lock and not sp.challenge
  -- a plain take of this rule may run in fw_takes (its fields when packed)
  sp.fwfast = alg == 'fw' and not sp.lock and not sp.challenge
  sp.fc, sp.fe = f .. 'c', f .. 'e'
  -- its answers may be fractions (floored before the reply): every
  -- algorithm but a fixed window's integer counts and ends, and any
  -- lockout (a factor's powers)
  sp.frac = alg ~= 'fw' or sp.lock ~= nil or sp.elastic ~= nil
  if NSPECS >= 1024 then SPECS, NSPECS = {}, 0 end
  SPECS[s], NSPECS = sp, NSPECS + 1
  return sp
end

-- The op tables are kept from call to call (a call is never re-entered):
-- building one per op per call was a third of a decision's Lua time.
-- parse sets the fields every op carries and clears the two that a call
-- reads before an algorithm writes them (held, seen); every other field
-- an algorithm leaves on an op is written before it is read.
local OPS = {}

local OUT = {}

-- answer is the batch's reply: its integers packed as one string of
-- 8-byte big-endian signed integers where the server has struct.pack
-- (one bulk string costs the server and the client less than an array
-- of integers), else as they are. FMT: the formats, by count. A reply of
-- more than PACKMAX integers goes as they are: unpack passes at most
-- 8000 values (Lua's C stack), and answer runs after the batch's writes,
-- so it must not fail.
local FMT = {}
local PACKMAX = 2000
local function answer(out)
  local n = #out
  if not spack or n > PACKMAX then return out end
  local f = FMT[n]
  if not f then f = '>' .. string.rep('l', n); FMT[n] = f end
  return spack(f, tunpack(out, 1, n))
end

-- SHORT: the kind and condition of an op written as its kind alone
-- (parse), split once.
local SHORT = {}

-- count is a batch's number of ops and arguments per op: a whole
-- number, NA arguments each (the kept reply table is cut to this call's
-- length: any other count would leave an earlier call's fields in it),
-- or 't': every argument after it one op's SPEC, its DYN 't'.
local function count(args)
  if args[2] == 't' then return #args - 2, 1 end
  local n = tonumber(args[2])
  if not n or n < 0 or n ~= floor(n) or 2 + n * NA ~= #args then return nil, 'otpguard: bad op count ' .. tostring(args[2]) end
  return n, NA
end

-- parse fills OPS from a batch's n ops, na arguments each (see count);
-- it returns an error or nothing.
local function parse(keys, args, n, na)
  local ops, k = OPS, 1
  for i = 1, n do
    local b = 2 + (i - 1) * na
    local sp, serr = spec(args[b + SPEC])
    if not sp then return serr end
    local op = ops[i]
    if not op then op = {c = 0, e = 0, fresh = false}; ops[i] = op end
    if op.sp ~= sp then setmetatable(op, sp.mt); op.sp = sp end
    -- DYN: the op's own arguments, "kind|cost|extra|member|at", or the
    -- kind alone for the common case (cost 1, no extra, member or at).
    -- The kind is a letter, then T or U for a take or peek that applies
    -- only when the batch's device is trusted (T) or untrusted (U).
    local d = 't'
    if na == NA then d = args[b + DYN] end
    local short = SHORT[d]
    if short then
      op.kind, op.cond, op.cost, op.extra, op.member, op.at = short[1], short[2], 1, 0, '', 0
    elseif #d <= 2 then
      short = {string.sub(d, 1, 1), string.sub(d, 2)}
      SHORT[d] = short -- (one or two bytes: a bounded table)
      op.kind, op.cond, op.cost, op.extra, op.member, op.at = short[1], short[2], 1, 0, '', 0
    else
      local kind, cond, cost, extra, member, at = string.match(d, '^(%a)(%a?)|(%d+)|(%d+)|([^|]*)|(%d+)$')
      if not kind then return 'otpguard: bad op arguments ' .. d end
      op.kind, op.cond, op.cost, op.extra, op.member, op.at = kind, cond, tonumber(cost), tonumber(extra), member, tonumber(at)
    end
    op.key, op.held, op.seen, op.count = keys[k], 0, false, nil
    k = k + 1
    if sp.lock then
      if sp.packed then
        op.lkey, op.lf = op.key, sp.f
      else
        op.lkey, op.lf = keys[k], ''
        k = k + 1
      end
    end
  end
end

-- check: a lockout in force denies before the algorithm is asked.
local function check(op, cost)
  local l = lock_until(op)
  if l > 0 then return false, 0, l - now, l - now, true end
  local ok, rem, reset, retry = A[op.alg].check(op, cost)
  if not ok and op.lock then
    -- at its limit, a rule with a lockout is about to lock (the failures
    -- in flight strike it): the wait is the lockout's, not the window's
    local _, d = next_lockout(op)
    retry = min(retry, d)
  end
  return ok, rem, reset, retry, false
end

---------------------------------------------------------------------------
-- Devices. An account's device tokens are revoked by the time at its key
-- og:{tag}dv (µs, its TTL the tokens' lifetime): a token issued at AT is
-- trusted while AT is after that time and now is before AT + lifetime
-- (the spec's window). A batch's device op ('d') comes first; the takes
-- and peeks marked T or U after it apply only when it trusted (T) or did
-- not (U). 'D' revokes (SET the time now).

local function device_trusted(op)
  local rv = tonumber(redis.call('GET', op.key) or 0) or 0
  return op.at > rv and now < op.at + op.window
end

-- The reply: {batch allowed, now, then 6 fields per op: allowed (0, 1;
-- 2 = skipped; 3 = not applicable: its device condition failed; 4 =
-- challenged: a challenge rule that would deny, which does not deny the
-- batch and takes nothing until the proof commits it ('k'), unless it
-- counts failures), remaining, reset, retry, locked (0/1), taken}. It is
-- written in place: op i's fields are out[j + 1] .. out[j + 6], j = 2 +
-- 6 (i - 1), all of them set in order first (a hole would end the reply),
-- and answered packed where the server can (answer).

-- untake reports what an allowed op leaves when nothing is taken: the
-- units back, and the state's end as it stands (0 when empty), not as the
-- take would have made it.
local function untake(op, out, j)
  -- (a challenged op's remaining is already the state as it stands)
  if out[j + 1] ~= 1 then
  elseif op.alg ~= 'ds' then out[j + 2] = out[j + 2] + op.cost elseif not op.seen then out[j + 2] = out[j + 2] + 1 end
  local alg = op.alg
  if alg == 'tb' then
    out[j + 3] = max(0, op.tat - now)
  elseif alg == 'fw' then
    if op.e > 0 then out[j + 3] = min(op.e - now, op.window) else out[j + 3] = 0 end
  elseif alg == 'sw' then
    if op.cur == 0 and op.prev == 0 then out[j + 3] = 0 end
  elseif alg == 'rt' then
    if op.ca == 0 and op.pa == 0 then out[j + 3] = 0 end
  elseif not op.seen and (op.count or 0) == 0 then
    out[j + 3] = 0
  end
end

-- fw_takes answers the commonest call, every op a take of one unit on a
-- fixed window without lockout or challenge ('t' of a rule whose spec is
-- fwfast), in one tight pass straight from the arguments: no op tables
-- (parse), and without the cases such ops cannot meet (no device,
-- condition, lease or fraction). A rule on its own key takes first (as
-- fw_take); a packed rule is checked against its hash, then written
-- when the batch allows (as A.fw.check and A.fw.commit). It answers as
-- those and A.fw.undo and untake do in the general passes below (the
-- test cuts this pass out and compares). It returns false, having
-- written nothing, for any other batch. Kept from call to call, as OPS:
-- TSP, each op's spec; TFRESH, whether its take started the window (own
-- key); TC and TE, its count and window's end as read (packed).
local TSP, TFRESH, TC, TE = {}, {}, {}, {}

-- fw_check is pass one for op i of fw_takes in a packed hash: the check
-- against the count and end read (a window that ended is empty).
local function fw_check(i, sp, key, out, j)
  local h = hread(key)
  local c, e = 0, h[sp.fe] or 0
  if e > now then c = h[sp.fc] or 0 else e = 0 end
  TC[i], TE[i] = c, e
  local left = min(e - now, sp.window)
  if c + 1 <= sp.limit then
    out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] = 1, sp.limit - c - 1, e > 0 and left or sp.window, 0, 0, 0
    return false
  end
  out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] = 0, max(0, sp.limit - c), e > 0 and left or 0, e > 0 and left or sp.window, 0, 0
  return true
end

local function fw_takes(keys, args, n, na, out)
  for i = 1, n do
    local b = 2 + (i - 1) * na
    if na == NA and args[b + DYN] ~= 't' then return false end
    local s = args[b + SPEC]
    local sp = SPECS[s] or spec(s) -- (a bad spec: the general path says so)
    if not sp or not sp.fwfast then return false end
    TSP[i] = sp
  end
  local allowed, packed = true, false
  for i = 1, n do
    local sp, j = TSP[i], 2 + 6 * (i - 1)
    if not allowed then
      out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] = 2, 0, 0, 0, 0, 0
    elseif sp.packed then
      packed = true
      if fw_check(i, sp, keys[i], out, j) and sp.enforce then allowed = false end
    else
      -- on its own key: the take, given back at once when it goes over
      local key = keys[i]
      local c = redis.call('INCRBY', key, '1')
      local fresh, e = c == 1, sp.window
      if fresh then
        if sp.M then redis.call('SET', key, fe_value(sp, 1), 'PX', sp.pxms) else redis.call('PEXPIRE', key, sp.pxms) end
      elseif sp.M then
        local x
        c, e, x = fe_split(sp, key, c)
        if e > 0 and c > sp.limit and not x then e = fe_exact(key) end
        if e > 0 then
          e = e - now
        else
          redis.call('SET', key, fe_value(sp, 1), 'PX', sp.pxms)
          c, fresh, e = 1, true, sp.window
        end
      else
        local p = redis.call('PTTL', key)
        if p > 0 then e = p * 1000
        elseif p == 0 then
          -- the key's last millisecond: its window is over, and this take
          -- starts the next (as fw_take)
          redis.call('SET', key, '1', 'PX', sp.pxms)
          c, fresh = 1, true
        else
          -- (no TTL cannot happen: if it did, the window starts now)
          redis.call('PEXPIRE', key, sp.pxms)
        end
      end
      TFRESH[i] = fresh
      if c <= sp.limit then
        -- (taken: kept if the batch allows, see below)
        out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] = 1, sp.limit - c, e, 0, 0, 1
      else
        -- over (nothing remains: the count before it was at the limit),
        -- given back at once (a window this take started is gone)
        if fresh then redis.call('DEL', key); e = 0 else redis.call('DECRBY', key, '1') end
        out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] = 0, 0, e, fresh and sp.window or e, 0, 0
        if sp.enforce then allowed = false end
      end
    end
  end
  -- the batch allowed: its takes are kept (answered so above), its
  -- checks written; denied: its takes given back, and each allowed rule
  -- answers as it stands
  for i = 1, (allowed and not packed) and 0 or n do
    local j, sp = 2 + 6 * (i - 1), TSP[i]
    if out[j + 1] ~= 1 then
    elseif allowed then
      out[j + 6] = 1
      if sp.packed then
        local e = TE[i]
        if e == 0 then e = now + sp.window end
        hput(keys[i], sp.fc, TC[i] + 1, sp.ttl)
        hput(keys[i], sp.fe, e, sp.ttl)
      end
    else
      out[j + 6] = 0
      if sp.packed then
        out[j + 3] = TE[i] > 0 and min(TE[i] - now, sp.window) or 0
      elseif TFRESH[i] then
        redis.call('DEL', keys[i])
        out[j + 3] = 0
      else
        redis.call('DECRBY', keys[i], '1')
        out[j + 3] = min(out[j + 3], sp.window)
      end
      out[j + 2] = out[j + 2] + 1
    end
  end
  if W then hflush() end
  out[1] = allowed and 1 or 0
  return true
end

local function batch(keys, args)
  local timed, terr = clock(args[1])
  if not timed then return redis.error_reply(terr or NOCLOCK) end
  H, W, T = nil, nil, nil -- made when a rule first needs them
  local n, na = count(args)
  if not n then return redis.error_reply(na) end
  -- the reply's table is kept from call to call too (growing a new one
  -- to 2 + 6n fields rehashed it four times): cut to this call's length
  local out = OUT
  out[1], out[2] = 0, now
  for k = #out, 2 + 6 * n + 1, -1 do out[k] = nil end
  if fw_takes(keys, args, n, na, out) then return answer(out) end
  local err = parse(keys, args, n, na)
  if err then return redis.error_reply(err) end
  local ops = OPS

  -- Check the takes and peeks; stop at the first enforcing denial.
  local allowed, trusted = true, false
  for i = 1, n do
    local op, j = ops[i], 2 + 6 * (i - 1)
    out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] = 1, 0, 0, 0, 0, 0
    if op.kind == 'd' then
      trusted = device_trusted(op)
      if not trusted then out[j + 1] = 0 end
    elseif op.cond ~= '' and (op.kind == 't' or op.kind == 'p') and (op.cond == 'T') ~= trusted then
      out[j + 1] = 3
    elseif op.kind == 't' or op.kind == 'p' then
      if not allowed then
        out[j + 1] = 2
      else
        local ok, rem, reset, retry, locked
        if op.kind == 't' and op.takefirst and op.cost > 0 then
          ok, rem, reset, retry = fw_take(op, op.cost)
          locked = false
        else
          ok, rem, reset, retry, locked = check(op, op.cost)
        end
        out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5] = ok and 1 or 0, rem, reset, retry, locked and 1 or 0
        if op.enforce and not ok then
          if op.challenge then out[j + 1] = 4 else allowed = false end
        end
      end
    end
  end

  -- Apply.
  for i = 1, n do
    local op, j = ops[i], 2 + 6 * (i - 1)
    local kind, alg = op.kind, A[op.alg]
    if kind == 't' then
      if out[j + 1] == 1 or out[j + 1] == 4 then
        if allowed and (out[j + 1] == 1 or op.challenge_takes) then
          -- a lockout answered the check before the algorithm read its
          -- state (a challenge rule counting failures takes anyway)
          if out[j + 5] == 1 then alg.check(op, op.cost) end
          local take = op.cost
          if op.alg == 'ds' then
            take = op.seen and 0 or 1 -- a value already seen costs nothing
          elseif op.extra > 0 then
            local more = min(op.extra, floor(out[j + 2] / 4)) -- a lease: at most a quarter of what is left
            take = take + more
            out[j + 2] = out[j + 2] - more
          end
          if op.held == 0 then
            alg.commit(op, take)
          elseif take > op.held then
            redis.call('INCRBY', op.key, take - op.held)
          end
          out[j + 6] = take
        else
          if op.held > 0 then A.fw.undo(op, op.held) end
          untake(op, out, j)
        end
      end
    elseif kind == 'p' then
      if out[j + 1] == 1 or out[j + 1] == 4 then untake(op, out, j) end
    elseif kind == 's' then
      local l = lock_until(op)
      if l > 0 then
        out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] = 0, 0, l - now, l - now, 1, 0
      elseif op.lock and (again(op) or not alg.check(op, 1)) then
        local d = strike(op)
        alg.clear(op) -- the attempts after the lockout count afresh
        out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] = 0, 0, d, d, 1, 0
      end
    elseif kind == 'r' or kind == 'l' or kind == 'c' then
      alg.refund(op)
    elseif kind == 'k' then
      -- a challenged take whose proof was given: taken whatever the
      -- state (the lockout and the limit judged it already)
      local ok, rem, reset = alg.check(op, op.cost)
      local take = op.cost
      if op.alg == 'ds' then take = op.seen and 0 or 1 end
      alg.commit(op, take)
      if not ok then rem = 0 end
      out[j + 1], out[j + 2], out[j + 3], out[j + 6] = 1, rem, reset, take
    elseif kind == 'd' then
      -- read in the first pass
    elseif kind == 'D' then
      -- a revocation's time never goes back: after a failover to a node
      -- whose clock is behind, a token issued in between (after the last
      -- revocation, in that clock) is revoked too. The key lasts the
      -- window from that time and REVOKE_SLACK more: Redis's own clock
      -- expires it, and a time passed behind Redis's (see clock) must
      -- still find it while a token issued before it lives
      local rv = max(now, (tonumber(redis.call('GET', op.key) or 0) or 0) + 1)
      redis.call('SET', op.key, fmt(rv), 'PX', fmt(ms(rv - now + op.window + REVOKE_SLACK)))
    elseif kind == 'u' then
      alg.clear(op)
      unlock(op)
      out[j + 2] = op.limit
    elseif kind == 'v' then
      -- Reserve: book the next turn of a token bucket (the pacer); AT
      -- carries the longest wait the caller accepts, in µs.
      local ok, rem, reset = A.tb.check(op, op.cost)
      local wait = max(0, op.allow_at - now)
      if wait <= op.at then
        A.tb.commit(op, op.cost)
        out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] = 1, max(0, rem), max(0, reset), wait, 0, op.cost
      else
        out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] = 0, 0, reset, wait, 0, 0
      end
    else
      return redis.error_reply('otpguard: unknown op kind ' .. tostring(kind))
    end
  end
  hflush()

  out[1] = allowed and 1 or 0
  for i = 1, n do
    if ops[i].frac then
      local j = 2 + 6 * (i - 1)
      out[j + 2], out[j + 3], out[j + 4] = floor(out[j + 2]), floor(out[j + 3]), floor(out[j + 4])
    end
  end
  return answer(out)
end

---------------------------------------------------------------------------
-- Verification codes: one hash per (destination, purpose): h (the keyed
-- digest of the code, bound to the address it was sent to), n (wrong
-- attempts) and r (the send's receipt: what the verify that approves the
-- code settles as a success; keyed hashes and numbers).

-- code_put: KEYS[1] the code key, KEYS[2] its number; ARGV: the time,
-- digest, TTL in ms, receipt (may be empty). Replaces any earlier code and its attempt
-- count; the earlier code's receipt is kept with the new one (a resend:
-- the code the owner enters settles every send still pending to the
-- address), the newest RECEIPT_MAX bytes of them.
local RECEIPT_MAX = 2048
-- The reply is this put's number: the time in µs, or one more than the
-- last put's when that is later (KEYS[2], kept twice the TTL and a minute
-- after the last put). It orders the sends' messages in the delivery
-- queue (a message is the newest of its slot only over one of a lower
-- number), so the message delivered is the one whose code is kept. A
-- number lost (evicted, a failover, a shorter TTL) starts again from the
-- time, still above every number given before it while the clock does not
-- step back.
local function code_put(keys, args)
  local timed, terr = clock(args[1])
  if not timed then return redis.error_reply(terr or NOCLOCK) end
  local v = max((tonumber(redis.call('GET', keys[2]) or '0') or 0) + 1, now)
  redis.call('SET', keys[2], fmt(v), 'PX', 2 * tonumber(args[3]) + 60000)
  local r = args[4] or ''
  local old = redis.call('HGET', keys[1], 'r')
  if old and old ~= '' then
    if r ~= '' then r = old .. ' ' .. r else r = old end
    if #r > RECEIPT_MAX then
      r = string.sub(r, #r - RECEIPT_MAX + 1)
      local sp = string.find(r, ' ', 1, true)
      if sp then r = string.sub(r, sp + 1) else r = '' end
    end
  end
  redis.call('DEL', keys[1])
  if r ~= '' then
    redis.call('HSET', keys[1], 'h', args[2], 'n', 0, 'r', r)
  else
    redis.call('HSET', keys[1], 'h', args[2], 'n', 0)
  end
  redis.call('PEXPIRE', keys[1], args[3])
  return v
end

-- code_check: KEYS[1] the code key; ARGV: the time or empty, digest, max
-- attempts. Reply {outcome, now, receipt}: 1 approved (the code is
-- consumed; its receipt), 2 wrong, 3 burned (this wrong guess used the
-- last attempt), 4 missing.
local function code_check(keys, args)
  local timed, terr = clock(args[1])
  if not timed then return redis.error_reply(terr or NOCLOCK) end
  local h = redis.call('HGET', keys[1], 'h')
  if not h then return {4, now, ''} end
  if h == args[2] then
    local r = redis.call('HGET', keys[1], 'r') or ''
    redis.call('DEL', keys[1])
    return {1, now, r}
  end
  local n = redis.call('HINCRBY', keys[1], 'n', 1)
  if n >= tonumber(args[3]) then
    redis.call('DEL', keys[1])
    return {3, now, ''}
  end
  return {2, now, ''}
end

---------------------------------------------------------------------------
-- Blobs: a held login result (encrypted by the client) and spent CAPTCHA
-- tokens, one key each, with a TTL. ARGV[1] is the time slot (unused).

-- blob_put: KEYS[1]; ARGV: -, value, TTL in ms.
local function blob_put(keys, args)
  redis.call('SET', keys[1], args[2], 'PX', args[3])
  return 1
end

-- blob_get: KEYS[1] → {value}, or {} when there is none.
local function blob_get(keys)
  local v = redis.call('GET', keys[1])
  if v then return {v} end
  return {}
end

-- blob_del: KEYS[1] → 1 when this call deleted it (one caller wins).
local function blob_del(keys)
  return redis.call('DEL', keys[1])
end

-- blob_once: KEYS[1]; ARGV: -, TTL in ms → 1 the first time, else 0.
local function blob_once(keys, args)
  if redis.call('SET', keys[1], '1', 'NX', 'PX', args[2]) then return 1 end
  return 0
end

if ENTRY == 'batch' then return batch(KEYS, ARGV) end
if ENTRY == 'code_put' then return code_put(KEYS, ARGV) end
if ENTRY == 'code_check' then return code_check(KEYS, ARGV) end
if ENTRY == 'blob_put' then return blob_put(KEYS, ARGV) end
if ENTRY == 'blob_get' then return blob_get(KEYS, ARGV) end
if ENTRY == 'blob_del' then return blob_del(KEYS, ARGV) end
if ENTRY == 'blob_once' then return blob_once(KEYS, ARGV) end
redis.register_function(VERSION .. '_batch', batch)
redis.register_function(VERSION .. '_code_put', code_put)
redis.register_function(VERSION .. '_code_check', code_check)
redis.register_function(VERSION .. '_blob_put', blob_put)
redis.register_function(VERSION .. '_blob_get', blob_get)
redis.register_function(VERSION .. '_blob_del', blob_del)
redis.register_function(VERSION .. '_blob_once', blob_once)
