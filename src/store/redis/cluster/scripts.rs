//! The scripts of a cross-slot update (see `PROTOCOL.md`); each step runs on
//! one slot, and each is safe to run twice (a call the cluster client sends
//! again after a lost connection changes nothing the first did not). A
//! node's script runs the steps of several updates, each as its own call
//! would (`steps.rs`).

use super::super::link::Conn;
use super::super::script::{call, loaded};

/// Parses a lock and puts back its old or its new entry.
const LOCKS: &str = r"
local function parse(v)
  local txn, lease, pold, pnew, plen, at =
    string.match(v, '^~(%x+)|(%-?%d+)|(%-?%d+)|(%-?%d+)|(%d+)|()')
  if not txn then return nil end
  at = at + tonumber(plen)
  local olen, from = string.match(v, '^(%d+)|()', at)
  if not olen then return nil end
  local old = string.sub(v, from, from + tonumber(olen) - 1)
  local new = string.sub(v, from + tonumber(olen))
  return {lease = tonumber(lease), pold = pold, pnew = pnew, old = old, new = new}
end
local function settle(key, l, commit)
  local target, px = l.old, l.pold
  if commit then target, px = l.new, l.pnew end
  if target == '' or tonumber(px) <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, target, 'PXAT', px)
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
";

/// Prewrite: locks the keys of one slot (never the primary's: the commit
/// checks and writes those) if each holds what the update read. `KEYS`: the
/// keys. `ARGV`: the update's id, its lease in ms (on this node's clock,
/// which the script reads), the clock `apply` ran at and how far this
/// node's clock may be before it (lead) and after it (lag) (-1: any; a basis
/// the store guessed is checked, one it read is not), then per key the entry
/// expected, the lock's body and the lock's `PXAT`. Answers `{now, 1}` locked
/// (or already locked by this update: a call sent again, whose clock is not
/// checked again), `{now, 0, held...}` nothing written, `{now, 3}` nothing
/// written: the node's clock is outside the bounds. Its first command reads
/// every key (`MGET`): if that fails (the node's script, below: the slot is
/// not served here), nothing was written and it answers `nil, error`. A key
/// read as none is locked with `NX`, which fails on a key holding no string
/// (`MGET` reads it as none): it answers `nil, WRONGTYPE, true` (other keys
/// of the step may be locked: a failed prewrite, which the update rolls
/// back).
const PREWRITE: &str = r"
local function prewrite(KEYS, ARGV)
  local got = redis.pcall('MGET', unpack(KEYS))
  if got.err then return nil, got.err end
  local txn, lease = ARGV[1], tonumber(ARGV[2])
  local at, lead, lag = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local n = (#ARGV - 5) / 3
  local mine = '~' .. txn .. '|'
  local ok, again = true, false
  for i = 1, n do
    local held = got[i] or ''
    got[i] = held
    if string.sub(held, 1, #mine) == mine then
      again = true
    elseif held ~= ARGV[3 * i + 3] then
      ok = false
    end
  end
  if not ok then
    local out = {now, 0}
    for i = 1, n do out[#out + 1] = got[i] end
    return out
  end
  if not again and ((lead >= 0 and now < at - lead) or (lag >= 0 and now > at + lag)) then
    return {now, 3}
  end
  local head = mine .. (now + lease) .. '|'
  for i = 1, n do
    if got[i] == '' then
      if not redis.call('SET', KEYS[i], head .. ARGV[3 * i + 4], 'PXAT', ARGV[3 * i + 5], 'NX') then
        return nil, 'WRONGTYPE the key holds a value that is not a string', true
      end
    elseif string.sub(got[i], 1, #mine) ~= mine then
      redis.call('SET', KEYS[i], head .. ARGV[3 * i + 4], 'PXAT', ARGV[3 * i + 5])
    end
  end
  return {now, 1}
end
";

/// Commit, on the primary's slot, once every other slot is prewritten: the
/// commit point. `KEYS`: the primary slot's keys (the primary first), then
/// the update's record. `ARGV`: the update's id, the clock `apply` ran at,
/// lead and lag (as a prewrite's), the record's `PXAT`, then per key the
/// entry expected, the new entry (`''`: none) and its `PXAT` (`K`: the key
/// keeps what it holds). If no record exists, every key holds what was
/// expected and the node's clock is within the bounds, each key takes its
/// new entry and the record says `C`, in one step: `{now, 1}`. A record
/// already there decides: `{now, 1}` for `C` (a call sent again), `{now, 2}`
/// for `A` (a reader rolled the update back). Otherwise the record says `A`
/// and no key is written: `{now, 0, held...}` (a key changed) or `{now, 3}`
/// (the clock). A key read as none that holds no string fails the step with
/// nothing written. Its first command reads every key (`MGET`), as a
/// prewrite's does.
const COMMIT: &str = r"
local function commit(KEYS, ARGV)
  local got = redis.pcall('MGET', unpack(KEYS))
  if got.err then return nil, got.err end
  local n = #KEYS - 1
  local rec, rpx = got[n + 1], ARGV[5]
  if rec == 'C' then return {now, 1} end
  if rec then return {now, 2} end
  local at, lead, lag = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local ok = true
  for i = 1, n do
    got[i] = got[i] or ''
    if got[i] ~= ARGV[3 * i + 3] then ok = false end
  end
  if not ok then
    redis.call('SET', KEYS[n + 1], 'A', 'PXAT', rpx)
    local out = {now, 0}
    for i = 1, n do out[#out + 1] = got[i] end
    return out
  end
  if (lead >= 0 and now < at - lead) or (lag >= 0 and now > at + lag) then
    redis.call('SET', KEYS[n + 1], 'A', 'PXAT', rpx)
    return {now, 3}
  end
  for i = 1, n do
    if got[i] == '' and ARGV[3 * i + 5] ~= 'K' and redis.call('EXISTS', KEYS[i]) == 1 then
      return nil, 'WRONGTYPE the key holds a value that is not a string', true
    end
  end
  for i = 1, n do
    local new, px = ARGV[3 * i + 4], ARGV[3 * i + 5]
    if px ~= 'K' then
      if new == '' then
        if got[i] ~= '' then redis.call('DEL', KEYS[i]) end
      else
        redis.call('SET', KEYS[i], new, 'PXAT', px)
      end
    end
  end
  redis.call('SET', KEYS[n + 1], 'C', 'PXAT', rpx)
  return {now, 1}
end
";

/// Settles the keys of one slot that hold the update's lock: to the new
/// entry (`C`) or the old (`A`). `KEYS`: the keys, then the update's record
/// when `ARGV[4]` (its `PXAT`) is not `0`. `ARGV`: the update's id, the
/// outcome, `1` when the first key must still hold the lock (an update of
/// an earlier version, whose commit point was a settle), the record's
/// `PXAT`. With a record, the outcome is written there in the same step,
/// and a record that already says otherwise changes nothing. Answers 1
/// done, 0 not (the lock was gone, or decided otherwise).
/// Its first command reads every key (`MGET`), as a prewrite's does.
const SETTLE: &str = r"
local function settle_keys(KEYS, ARGV)
  local got = redis.pcall('MGET', unpack(KEYS))
  if got.err then return nil, got.err end
  local txn, outcome, must, rpx = ARGV[1], ARGV[2], ARGV[3] == '1', ARGV[4]
  local n = #KEYS
  if rpx ~= '0' then
    n = n - 1
    local rec = got[n + 1]
    if rec and rec ~= outcome then return 0 end
    if rec and must then return 1 end
  end
  local mine = '~' .. txn .. '|'
  if must and string.sub(got[1] or '', 1, #mine) ~= mine then return 0 end
  for i = 1, n do
    local v = got[i]
    if v and string.sub(v, 1, #mine) == mine then
      local l = parse(v)
      if l then settle(KEYS[i], l, outcome == 'C') end
    end
  end
  if rpx ~= '0' then redis.call('SET', KEYS[n + 1], outcome, 'PXAT', rpx) end
  return 1
end
";

/// The steps of several updates on one node, of any of its slots (see
/// `steps.rs`), each run on its own as its one-slot call would run it.
/// Redis 7's flag lets the script touch keys of every slot the node serves;
/// it declares no key, so the node never redirects the call. `ARGV`: per
/// step, `P` (a prewrite), `C` (a commit) or `S` (a settle), how many keys
/// and how many arguments it has, its keys, its arguments. A step's first
/// command reads all its keys (all of one slot), and fails if the node does
/// not serve that slot, or the slot is moving and its keys are not all still there:
/// that step is answered `E<error>`, nothing of it written; a step that
/// failed after it may have written is answered `F<error>`. The answer is
/// `{now, answer of each step...}`, each as its one-slot call answers.
const NODE: &str = r"
local out, i = {now}, 1
while i <= #ARGV do
  local kind, nk, na = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local keys = {unpack(ARGV, i + 3, i + 2 + nk)}
  local args = {unpack(ARGV, i + 3 + nk, i + 2 + nk + na)}
  i = i + 3 + nk + na
  local answer, err, ran
  if kind == 'P' then
    answer, err, ran = prewrite(keys, args)
  elseif kind == 'C' then
    answer, err, ran = commit(keys, args)
  else
    answer, err = settle_keys(keys, args)
  end
  if err then answer = (ran and 'F' or 'E') .. err end
  out[#out + 1] = answer
end
return out
";

/// How a step's call of its own ends: its answer, or its error as the
/// script's.
const ALONE: &str = r"
if err then return redis.error_reply(err) end
return answer
";

/// Resolves an update for a reader that met its lock past the lock's lease,
/// on the primary's slot: `KEYS`: the primary key, the update's record;
/// `ARGV`: its id, how long a record of a rollback lives (ms). Answers
/// `{now, 'C'}` or `{now, 'A'}` when decided; else `A` is recorded (the
/// record keeps a later commit of it from landing) and answered. An update
/// of an earlier version locked its primary key too, with the lease: while
/// the primary holds such a lock within its lease, `{now, 'W', ms left}`;
/// past it, the primary is rolled back with the record.
const RESOLVE: &str = r"
local rec = redis.call('GET', KEYS[2])
if rec then return {now, rec} end
local mine = '~' .. ARGV[1] .. '|'
local v = redis.call('GET', KEYS[1]) or ''
if string.sub(v, 1, #mine) == mine then
  local l = parse(v)
  if l and now < l.lease then return {now, 'W', l.lease - now} end
  if l then settle(KEYS[1], l, false) end
end
redis.call('SET', KEYS[2], 'A', 'PX', ARGV[2])
return {now, 'A'}
";

/// What a call does: a step an update takes on one slot, or a reader's
/// resolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Prewrite,
    Commit,
    Settle,
    Resolve,
}

/// One call of a script on one slot's keys, sent as `EVALSHA` (the script
/// loaded and sent again if the node lacks it), or as one step of a node's
/// call (`steps.rs`).
#[derive(Debug)]
pub(super) struct Call {
    kind: Kind,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call {
    pub(super) fn new(kind: Kind) -> Self {
        Call { kind, keys: Vec::new(), args: Vec::new() }
    }

    pub(super) fn key(&mut self, key: impl redis::ToRedisArgs) -> &mut Self {
        self.keys.extend(key.to_redis_args());
        self
    }

    pub(super) fn arg(&mut self, arg: impl redis::ToRedisArgs) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    pub(super) fn kind(&self) -> Kind {
        self.kind
    }

    /// The slot of the call's keys (all of one slot).
    pub(super) fn slot(&self) -> u16 {
        self.keys.first().map_or(0, |key| super::slot_of_name(key))
    }

    fn script(&self) -> &'static redis::Script {
        let scripts = scripts();
        match self.kind {
            Kind::Prewrite => &scripts.prewrite,
            Kind::Commit => &scripts.commit,
            Kind::Settle => &scripts.settle,
            Kind::Resolve => &scripts.resolve,
        }
    }

    /// Appends this call to the arguments of a node's call ([`NODE`]): its
    /// kind, its numbers of keys and arguments, its keys and its arguments.
    pub(super) fn push_step(&self, cmd: &mut redis::Cmd) {
        debug_assert!(self.kind != Kind::Resolve, "a node's call carries prewrites, commits and settles");
        let kind = match self.kind {
            Kind::Prewrite => "P",
            Kind::Commit => "C",
            Kind::Settle | Kind::Resolve => "S",
        };
        cmd.arg(kind).arg(self.keys.len()).arg(self.args.len());
        for key in &self.keys {
            cmd.arg(key);
        }
        for arg in &self.args {
            cmd.arg(arg);
        }
    }

    /// Sends the call; with `replicas` > 0, followed in one pipeline, on the
    /// same connection to the same node, by `WAIT replicas`, whose count
    /// covers this call's writes. The script's answer, and how many replicas
    /// acknowledged (`u64::MAX` when none were asked for).
    pub(super) async fn send(&self, conn: &mut Conn, replicas: u32) -> redis::RedisResult<(redis::Value, u64)> {
        let script = self.script();
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash()).arg(self.keys.len());
        for key in &self.keys {
            cmd.arg(key);
        }
        for arg in &self.args {
            cmd.arg(arg);
        }
        let send = || {
            let (cmd, mut conn) = (&cmd, conn.clone());
            async move { call(&mut conn, cmd, replicas).await }
        };
        loaded(script, conn.clone(), send).await
    }

    /// Sends the call, asking no replica; its answer as a `T`.
    pub(super) async fn invoke<T: redis::FromRedisValue>(&self, conn: &mut Conn) -> redis::RedisResult<T> {
        let (answer, _) = self.send(conn, 0).await?;
        Ok(redis::from_redis_value(answer)?)
    }
}

/// The scripts, hashed once per store.
pub(super) struct TxnScripts {
    prewrite: redis::Script,
    commit: redis::Script,
    settle: redis::Script,
    resolve: redis::Script,
    /// Several prewrites, commits and settles on one node ([`NODE`]).
    pub(super) node: redis::Script,
}

impl TxnScripts {
    fn new() -> Self {
        let one = |body: &str, call: &str| redis::Script::new(&format!("{LOCKS}{body}{call}"));
        TxnScripts {
            prewrite: one(PREWRITE, &format!("local answer, err = prewrite(KEYS, ARGV){ALONE}")),
            commit: one(COMMIT, &format!("local answer, err = commit(KEYS, ARGV){ALONE}")),
            settle: one(SETTLE, &format!("local answer, err = settle_keys(KEYS, ARGV){ALONE}")),
            resolve: one(RESOLVE, ""),
            node: redis::Script::new(&format!(
                "#!lua flags=allow-cross-slot-keys\n{LOCKS}{PREWRITE}{COMMIT}{SETTLE}{NODE}"
            )),
        }
    }
}

/// The scripts of every store of this process.
pub(super) fn scripts() -> &'static TxnScripts {
    static SCRIPTS: std::sync::OnceLock<TxnScripts> = std::sync::OnceLock::new();
    SCRIPTS.get_or_init(TxnScripts::new)
}
