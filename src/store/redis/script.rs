//! The two server-side scripts, and what they answer.
//!
//! Every key a script touches is passed in `KEYS`, never built inside it, as
//! proxies and Cluster require. The scripts are sent by hash (`EVALSHA`) and
//! loaded again when the server answers `NOSCRIPT` (after a restart or a
//! failover): `redis::Script` does both.

use redis::aio::ConnectionManager;
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

/// The compare-and-set. `KEYS`: the entries' keys, then as many claim keys.
/// `ARGV`: the clock `apply` ran at, how far the server's clock may be before
/// it (lead) and after it (lag; -1: any), this update's token, whether to
/// claim the keys if the write misses, then per key the raw entry `apply` was
/// given (`''`: none), then per key what to do (`K` keep, `D` delete, or the
/// raw entry to put), then per key the `PXAT` of a put.
///
/// Writes only if every key still holds what `apply` was given and the clock
/// is within bounds: `{1, now_ms}`. Otherwise writes nothing and answers what
/// the keys hold now, so that `apply` can run again without another read:
/// `{0, now_ms, raw...}`.
///
/// Claims keep instances fair on a hot key: an update that missed before
/// claims its keys for its next try (for at most 100 ms), and while another
/// update's claim holds, a write is not tried: `{2, now_ms, raw...}`, wait.
const WRITE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = #KEYS / 2
local at, lead, lag = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local token, claim = ARGV[4], ARGV[5] == '1'
local ok = now >= at - lead and (lag < 0 or now <= at + lag)
local held, mine, status = {}, {}, 1
for i = 1, n do
  held[i] = redis.call('GET', KEYS[i]) or ''
  if held[i] ~= ARGV[5 + i] then ok = false end
  local owner = redis.call('GET', KEYS[n + i])
  if owner then
    if owner == token then mine[i] = true else status = 2 end
  end
end
if status == 1 and not ok then
  status = 0
  if claim then
    for i = 1, n do redis.call('SET', KEYS[n + i], token, 'PX', 100) end
  end
end
if status ~= 1 then
  local out = {status, now}
  for i = 1, n do out[2 + i] = held[i] end
  return out
end
for i = 1, n do
  local op = ARGV[5 + n + i]
  if op == 'D' then
    if held[i] ~= '' then redis.call('DEL', KEYS[i]) end
  elseif op ~= 'K' then
    redis.call('SET', KEYS[i], op, 'PXAT', ARGV[5 + 2 * n + i])
  end
  if mine[i] then redis.call('DEL', KEYS[n + i]) end
end
return {1, now}
";

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
    write: Script,
    sweep: Script,
}

/// What one key should become.
#[derive(Debug)]
pub(super) enum Op {
    Keep,
    Delete,
    /// Put `raw`; Redis drops it at `pxat` (its expiry plus the grace).
    Put {
        raw: Raw,
        pxat: Millis,
    },
}

/// The answer of [`Scripts::write`].
#[derive(Debug)]
pub(super) enum Written {
    /// Written, at the server's clock.
    Done { now: Millis },
    /// Nothing written: what the keys hold now, and the server's clock.
    Changed { now: Millis, held: Vec<Raw> },
    /// Not tried: another update has claimed a key for its next try.
    Claimed { now: Millis, held: Vec<Raw> },
}

impl Scripts {
    pub(super) fn new() -> Self {
        Scripts { read: Script::new(READ), write: Script::new(WRITE), sweep: Script::new(SWEEP) }
    }

    /// The keys' raw entries and the server's clock.
    pub(super) async fn read(
        &self,
        conn: &mut ConnectionManager,
        names: &[String],
    ) -> redis::RedisResult<(Millis, Vec<Raw>)> {
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
    pub(super) async fn sweep(&self, conn: &mut ConnectionManager, names: &[Vec<u8>]) -> redis::RedisResult<u64> {
        let mut call = self.sweep.prepare_invoke();
        for name in names {
            call.key(name);
        }
        call.invoke_async(conn).await
    }

    /// Writes `call.ops` if the keys still hold `call.expected` and the clock
    /// is within `call.lead`/`call.lag` of `call.at`.
    pub(super) async fn write(
        &self,
        conn: &mut ConnectionManager,
        call: &WriteCall<'_>,
    ) -> redis::RedisResult<Written> {
        let mut invoke = self.write.prepare_invoke();
        for name in call.names.iter().chain(call.claims) {
            invoke.key(name);
        }
        invoke.arg(call.at).arg(call.lead).arg(call.lag.unwrap_or(-1)).arg(call.token).arg(if call.claim {
            "1"
        } else {
            "0"
        });
        for raw in call.expected {
            invoke.arg(raw.as_bytes());
        }
        for op in call.ops {
            match op {
                Op::Keep => invoke.arg("K"),
                Op::Delete => invoke.arg("D"),
                Op::Put { raw, .. } => invoke.arg(raw.as_bytes()),
            };
        }
        for op in call.ops {
            match op {
                Op::Put { pxat, .. } => invoke.arg(*pxat),
                Op::Keep | Op::Delete => invoke.arg(0),
            };
        }
        let reply: Vec<Value> = invoke.invoke_async(conn).await?;
        let mut items = reply.into_iter();
        let status = items.next();
        let now = millis(items.next())?;
        let held = || items.map(raw).collect::<redis::RedisResult<Vec<Raw>>>();
        match status {
            Some(Value::Int(1)) => Ok(Written::Done { now }),
            Some(Value::Int(2)) => Ok(Written::Claimed { now, held: held()? }),
            _ => Ok(Written::Changed { now, held: held()? }),
        }
    }
}

/// One compare-and-set: see [`Scripts::write`].
#[derive(Debug)]
pub(super) struct WriteCall<'a> {
    pub(super) names: &'a [String],
    pub(super) claims: &'a [String],
    pub(super) expected: &'a [Raw],
    pub(super) ops: &'a [Op],
    pub(super) at: Millis,
    pub(super) lead: i64,
    pub(super) lag: Option<i64>,
    pub(super) token: u64,
    pub(super) claim: bool,
}

fn millis(value: Option<Value>) -> redis::RedisResult<Millis> {
    match value {
        Some(Value::Int(ms)) => Ok(ms),
        other => Err(unexpected(format!("the script answered {other:?} for the clock"))),
    }
}

fn raw(value: Value) -> redis::RedisResult<Raw> {
    match value {
        Value::BulkString(bytes) => Ok(Raw::from_bytes(bytes)),
        Value::SimpleString(s) => Ok(Raw::from_bytes(s.into_bytes())),
        Value::Nil => Ok(Raw::none()),
        other => Err(unexpected(format!("the script answered {other:?} for an entry"))),
    }
}

fn unexpected(detail: String) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "unexpected script answer", detail))
}
