//! The server-side scripts (a read, the compare-and-set, a sweep), and what
//! the read and the sweep answer; `batch.rs` sends the compare-and-set.
//!
//! Every key a script touches is passed in `KEYS`, never built inside it, as
//! proxies and Cluster require. The scripts are sent by hash (`EVALSHA`) and
//! loaded again when the server answers `NOSCRIPT` (after a restart or a
//! failover).

use std::future::Future;

use super::link::Conn;
use redis::{Script, Value};

use super::entry::Raw;
use crate::Millis;

/// Reads the keys and the server's clock in one step: `{now_ms, raw...}`,
/// `''` for a key with no entry.
const READ: &str = r"
local t = redis.call('TIME')
local out = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
for i = 1, #KEYS do
  out[i + 1] = redis.call('GET', KEYS[i]) or ''
end
return out
";

/// The compare-and-set of every update of a batch (see `batch.rs`), each on
/// its own: one update's keys, clock or failure never decide another's.
///
/// `KEYS`: per update, its entries' keys, then as many claim keys. `ARGV`:
/// per update, how many keys it has, the clock `apply` ran at, how far the
/// server's clock may be before it (lead) and after it (lag; -1: any), its
/// token, whether to claim its keys if the write misses; then per key the raw
/// entry `apply` was given (`''`: none), then per key what to do (`K` keep,
/// `D` delete, or the raw entry to put), then per key the `PXAT` of a put.
///
/// An update is written only if every key still holds what `apply` was given
/// and the clock is within bounds: `1`. Otherwise nothing of it is written and
/// the answer is what its keys hold now, so that `apply` can run again
/// without another read: `0, raw...`. A command the server refuses (`OOM`)
/// leaves the update unwritten and answers `3, error`: Redis refuses a write
/// for memory only before the script has written anything, so none of the
/// update's keys changed. The answer is `{now_ms, answer of each update...}`.
///
/// The script is kept short, since Redis runs it for every count on the
/// cores the clients share: `TIME` once per call, one `MGET` of an update's
/// keys and claims (on a cluster node, an update of several of its slots:
/// one per key and its claim, as a command reads one slot's keys, after the
/// whole `MGET` failed), and one `SET` per key written. `MGET` reads a key that
/// holds no string as none; a put on a key read as none is `SET ... NX`,
/// which fails on such a key, and the update is answered `3, WRONGTYPE`
/// with nothing written, as a `GET` of it would have failed (an update of
/// several keys asks `EXISTS` of each such key before it writes any).
///
/// Each call of this script is its updates' one try: the store never sends
/// it again after a failure that may have come after it ran (a lost
/// connection, a timeout: the count is answered unavailable). On one server
/// the connection sends nothing again by itself; on a cluster the write
/// script goes on a client that sends nothing again by itself, and the store
/// sends it again only after a node's answer that it ran nothing of it
/// (`cluster/once.rs`). So the script needs no record of what it wrote: no
/// acknowledged count is doubled by a call sent again, and none is lost.
/// A claim that holds `done:…` (the mark that earlier versions left on a
/// cluster for a call sent again) is no claim.
///
/// Claims keep instances fair on a hot key: an update that missed before
/// claims its keys for its next try (for at most 100 ms), and while another
/// update's claim holds, a write is not tried: `2, raw...`, wait. Claims only
/// make the order fair, never the count exact: setting or dropping one that
/// the server refuses is let go (it expires by itself).
macro_rules! write_body {
    () => {
        r"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local out, k = {now}, 0
while a < na do
  local n = tonumber(ARGV[a + 1])
  local at, lag = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 4])
  local ok = now >= at - tonumber(ARGV[a + 3]) and (lag < 0 or now <= at + lag)
  local token, mode = ARGV[a + 5], ARGV[a + 6]
  a = a + 6
  local base = kb + k
  local got = redis.pcall('MGET', unpack(K, base + 1, base + 2 * n))
  if got.err and n > 1 then
    got = {}
    for i = 1, n do
      local one = redis.pcall('MGET', K[base + i], K[base + n + i])
      if one.err then
        got = one
        break
      end
      got[i], got[n + i] = one[1], one[2]
    end
  end
  if got.err then
    out[#out + 1] = 4
    out[#out + 1] = got.err
  else
    local status, mine = 1, nil
    for i = 1, n do
      local held = got[i] or ''
      got[i] = held
      if held ~= ARGV[a + i] then ok = false end
      local owner = got[n + i]
      if owner and string.sub(owner, 1, 5) ~= 'done:' then
        if owner == token then
          mine = mine or {}
          mine[i] = true
        else
          status = 2
        end
      end
    end
    local err
    if status == 1 and not ok then
      status = 0
      if mode == '1' then
        for i = 1, n do redis.pcall('SET', K[base + n + i], token, 'PX', 100) end
      end
    elseif status == 1 and n > 1 then
      -- A put's `NX` fails on a key holding no string: find that before
      -- any key is written.
      for i = 1, n do
        local op = ARGV[a + n + i]
        if got[i] == '' and op ~= 'K' and op ~= 'D' and redis.call('EXISTS', K[base + i]) == 1 then
          err = 'WRONGTYPE the key holds a value that is not a string'
        end
      end
    end
    if status == 1 and ok and not err then
      for i = 1, n do
        local op, r = ARGV[a + n + i], nil
        if op == 'D' then
          if got[i] ~= '' then r = redis.pcall('DEL', K[base + i]) end
        elseif op ~= 'K' then
          if got[i] == '' then
            r = redis.pcall('SET', K[base + i], op, 'PXAT', ARGV[a + 2 * n + i], 'NX')
            if not r then r = {err = 'WRONGTYPE the key holds a value that is not a string'} end
          else
            r = redis.pcall('SET', K[base + i], op, 'PXAT', ARGV[a + 2 * n + i])
          end
        end
        if type(r) == 'table' and r.err then
          err = r.err
          break
        end
        if mine and mine[i] then redis.pcall('DEL', K[base + n + i]) end
      end
    end
    if err then
      out[#out + 1] = 3
      out[#out + 1] = err
    else
      out[#out + 1] = status
      if status ~= 1 then
        for i = 1, n do out[#out + 1] = got[i] end
      end
    end
  end
  k, a = k + 2 * n, a + 3 * n
end
return out
"
    };
}

/// [`write_body!`] on one server or one slot: the keys are `KEYS`.
pub(super) const WRITE: &str = concat!("local K, kb, a, na = KEYS, 0, 0, #ARGV", write_body!());

/// [`write_body!`] on one cluster node, for updates of several of its slots:
/// `ARGV` is how many arguments the updates have, those arguments, then the
/// keys (in `KEYS`' order). Redis 7's flag lets one script touch keys of
/// every slot the node serves; the script declares no key, so the node never
/// redirects the call, and each update's `MGET` fails alone (`4, error`,
/// nothing written) if a slot of its keys is not served there, or is moving
/// and its keys are not all still there. An update's keys may lie in
/// several slots of the node (`batch.rs`): each key is read with its claim
/// then, a slot a command.
pub(super) const WRITE_NODE: &str = concat!(
    "#!lua flags=allow-cross-slot-keys\n",
    "local K, a = ARGV, 1\n",
    "local na = tonumber(ARGV[1]) + 1\n",
    "local kb = na",
    write_body!()
);

/// Removes the keys whose stored expiry has passed on the server's clock (a
/// sweep's step over keys `SCAN` found); answers how many went. A key that
/// does not parse is left alone.
const SWEEP: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local removed = 0
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  local at = v and tonumber(string.match(v, '^(-?%d+)|'))
  if at and at <= now then
    redis.call('DEL', KEYS[i])
    removed = removed + 1
  end
end
return removed
";

/// The scripts, hashed once per store.
#[derive(Debug)]
pub(super) struct Scripts {
    read: Script,
    sweep: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Scripts { read: Script::new(READ), sweep: Script::new(SWEEP) }
    }

    /// The keys' raw entries and the server's clock.
    pub(super) async fn read(&self, conn: &mut Conn, names: &[String]) -> redis::RedisResult<(Millis, Vec<Raw>)> {
        let mut call = self.read.prepare_invoke();
        for name in names {
            call.key(name);
        }
        let reply: Vec<Value> = call.invoke_async(conn).await?;
        let mut items = reply.into_iter();
        let now = millis(items.next())?;
        Ok((now, items.map(raw).collect::<redis::RedisResult<_>>()?))
    }

    /// Removes those of `names` whose entry has expired; answers how many.
    pub(super) async fn sweep(&self, conn: &mut Conn, names: &[Vec<u8>]) -> redis::RedisResult<u64> {
        let mut call = self.sweep.prepare_invoke();
        for name in names {
            call.key(name);
        }
        call.invoke_async(conn).await
    }
}

/// How long a count waits for its replicas (`WAIT`), under the client's
/// bound on a call.
pub(super) const WAIT_MS: u64 = 1_000;

/// Sends `cmd`, followed by `WAIT` for `min_acked` replicas when there are
/// any to wait for; the script's answer, and how many replicas acknowledged
/// (`u64::MAX` when none were asked for).
pub(super) async fn call(conn: &mut Conn, cmd: &redis::Cmd, min_acked: u32) -> redis::RedisResult<(Value, u64)> {
    if min_acked == 0 {
        return Ok((cmd.query_async::<Value>(conn).await?, u64::MAX));
    }
    let mut pipe = redis::pipe();
    pipe.add_command(cmd.clone()).cmd("WAIT").arg(min_acked).arg(WAIT_MS);
    let (value, acked): (Value, u64) = pipe.query_async(conn).await?;
    Ok((value, acked))
}

/// `send`'s answer, a call of `script`; when the server no longer held the
/// script (`NOSCRIPT`, after a restart or a failover: the call ran nothing),
/// the script loaded on `conn` and the call sent once more.
pub(super) async fn loaded<T, F>(script: &Script, mut conn: Conn, mut send: impl FnMut() -> F) -> redis::RedisResult<T>
where
    F: Future<Output = redis::RedisResult<T>>,
{
    match send().await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load_async(&mut conn).await?;
            send().await
        }
        answer => answer,
    }
}

pub(super) fn millis(value: Option<Value>) -> redis::RedisResult<Millis> {
    match value {
        Some(Value::Int(ms)) => Ok(ms),
        other => Err(unexpected(format!("the script answered {other:?} for the clock"))),
    }
}

pub(super) fn raw(value: Value) -> redis::RedisResult<Raw> {
    match value {
        Value::BulkString(bytes) => Ok(Raw::from_bytes(bytes)),
        Value::SimpleString(s) => Ok(Raw::from_bytes(s.into_bytes())),
        Value::Nil => Ok(Raw::none()),
        other => Err(unexpected(format!("the script answered {other:?} for an entry"))),
    }
}

pub(super) fn unexpected(detail: String) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "unexpected script answer", detail))
}
