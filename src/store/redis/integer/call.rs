//! The integer script, and its calls: the integer counts ready in one turn
//! of the runtime go to Redis in one call (`turn.rs`), each counted on its
//! own in it, as the compare-and-sets of `batch.rs` are.
//!
//! The script runs [`GcraStep::run`]'s rule on the key's entry, read as
//! integers: the same entry as a count through `update` leaves, one string
//! `"<tat>|<interval>"` (`entry.rs`: the expiry, then the JSON of the
//! value), written with `PXAT` at the TAT plus the grace. It runs the rule
//! only where Lua's numbers (doubles) are exact and the rule is the short
//! one: a key with no live entry, or one counted at the step's interval.
//! Any other (a reload changed the interval, a value that is not that
//! integer, a number of more than 15 digits) it answers "by update",
//! nothing written, and the count goes through the compare-and-set, which
//! runs the whole rule in Rust.

use std::sync::Arc;

use redis::{Script, Value};
use tokio::sync::oneshot;

use super::super::batch::unacked;
use super::super::link::Link;
use super::super::script::{call, loaded, millis, unexpected};
use super::super::turn::{self, Turn, Waiting};
use super::super::{failed, refused};
use crate::{GcraCounted, GcraStep, Millis, StoreError};

/// `KEYS`: the counts' keys. `ARGV`: the grace (ms); the number of kinds
/// of count in the call; per kind its step's interval, capacity and cost,
/// and `1` when it may add a key (the bound has room), else `0`; then per
/// count the number of its kind (from `1`).
///
/// A call's counts are of few kinds (one limit, with room or without), and
/// each argument costs Redis an object and Lua a `strtod` to read as a
/// number: so a kind's numbers are sent and read once a call, and a count
/// finds its kind by the text of its number. A number goes to Redis as text
/// made with `%d`: Lua would write it with `%.17g`, printf's slow path.
///
/// The answer is `{now_ms, one answer per count}`. A count's answer is a
/// number: `-1` when the script leaves it to the compare-and-set, nothing
/// written; else `(tat - now) * 8 + status * 2 + added`, where the TAT is
/// the one the step counted from (at or after `now`), `status` is `1`
/// allowed, `0` refused, `2` a new key the bound has no room for (nothing
/// written), and `added` is `1` when the key was new. Or the text of the
/// error Redis answered a command of the count (nothing written): as text,
/// since an error in the answer fails the whole call in the client. One number a count
/// keeps the answer short: Redis writes it, this process reads it.
///
/// Lua's numbers are doubles: a TAT is exact to 2^53, and `(tat - now) * 8`
/// is at most a capacity times 8 (see [`EXACT`]).
const COUNT: &str = r"
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local grace = tonumber(ARGV[1])
local kinds = {}
for k = 1, tonumber(ARGV[2]) do
  local a = k * 4 - 1
  -- interval, capacity, cost, may add a key, the entry's text after the TAT
  kinds[tostring(k)] = {tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), ARGV[a + 3] == '1', '|' .. ARGV[a]}
end
local base = #ARGV - #KEYS
local out = {now}
local find, sub, pcall, format = string.find, string.sub, redis.pcall, string.format
for i = 1, #KEYS do
  local kind = kinds[ARGV[base + i]]
  local interval, capacity, cost = kind[1], kind[2], kind[3]
  local answer = -1
  local got = pcall('GET', KEYS[i])
  if got and got.err then
    answer = got.err
  else
    local tat, plain = now, true
    if got then
      local _, bar = find(got, '^%-?%d+|')
      local at = bar and bar < 17 and tonumber(sub(got, 1, bar - 1))
      if not at then
        plain = false
      elseif at > now then
        if sub(got, bar) == kind[5] then tat = at else plain = false end
      end
    end
    if plain then
      local span = interval * (cost > 1 and cost or 1)
      local next = tat + span
      local status, added = 0, 0
      if span <= capacity and next - now <= capacity then
        status = 1
        if cost > 0 then
          if not got and not kind[4] then
            status = 2
          else
            local r = pcall('SET', KEYS[i], format('%d|%d', next, interval), 'PXAT', format('%d', next + grace))
            if r.err then
              status, answer = 0, r.err
            elseif not got then
              added = 1
            end
          end
        end
      end
      if answer == -1 then
        answer = (tat - now) * 8 + status * 2 + added
      end
    end
  end
  out[i + 1] = answer
end
return out
";

/// The largest number the script takes (an interval, a capacity, a span, the
/// grace): Lua counts in doubles, exact to 2^53, and a TAT is at most a clock
/// plus a capacity plus a span, its expiry that plus the grace, an answer a
/// capacity times 8.
pub(super) const EXACT: Millis = 1 << 49;

/// How one integer count went.
#[derive(Debug)]
pub(super) enum Counted {
    /// Counted: what the step counted, and whether the key was new.
    Done { counted: GcraCounted, added: bool },
    /// The key is new and the bound had no room: nothing written.
    Full,
    /// The script leaves it to the compare-and-set: nothing written.
    ByUpdate,
}

struct Pending {
    name: String,
    step: GcraStep,
    may_add: bool,
    reply: Reply,
}

/// Where a count's answer goes.
type Reply = oneshot::Sender<Result<Counted, StoreError>>;

/// A count's answer, ready to hand over.
type Answered = (Reply, Result<Counted, StoreError>);

impl Waiting for Pending {
    fn slot(&self) -> u16 {
        0
    }

    fn given_up(&self) -> bool {
        self.reply.is_closed()
    }
}

/// The integer counts waiting for the next call, and how to send one.
pub(in crate::store::redis) struct IntegerCalls {
    link: Arc<Link>,
    script: Script,
    /// How long after its TAT Redis drops an entry, in ms.
    grace: Millis,
    /// Replicas that must acknowledge a call before its counts are
    /// answered (`WAIT`); 0: none.
    min_acked: u32,
    waiting: Turn<Pending>,
}

impl std::fmt::Debug for IntegerCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntegerCalls").field("waiting", &self.waiting.len()).finish_non_exhaustive()
    }
}

impl IntegerCalls {
    pub(in crate::store::redis) fn new(link: Arc<Link>, grace: Millis, min_acked: u32) -> Arc<Self> {
        // Writes that wait for replicas go on connections of their own (`link.rs`),
        // as many at once as there are; others, two at once.
        let waiting = if min_acked == 0 { Turn::capped() } else { Turn::new() };
        Arc::new(IntegerCalls { link, script: Script::new(COUNT), grace, min_acked, waiting })
    }

    /// Counts `step` on the key `name` in the next call; `may_add`: the
    /// bound has room for it if it is new. A count that stops waiting
    /// before its call is sent is left out of it.
    pub(super) async fn count(
        self: &Arc<Self>,
        name: String,
        step: GcraStep,
        may_add: bool,
    ) -> Result<Counted, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.waiting.push(Pending { name, step, may_add, reply }, || self.clone().flush());
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::unavailable(
                crate::error::Unavailable::StoreFailed,
                "the call to Redis carrying this count was dropped; it may have been written",
            ))
        })
    }

    async fn flush(self: Arc<Self>) {
        let (_out, batch) = self.waiting.take_when_free().await;
        let sends = turn::calls(batch, None).into_iter().map(|batch| self.send(batch));
        turn::all(sends.collect()).await;
    }

    /// One script call for `batch`, and each count answered.
    async fn send(&self, batch: Vec<Pending>) {
        let reply = loaded(&self.script, self.link.conn(), || self.call(&batch)).await;
        turn::hand_over(self.answer(batch, reply)).await;
    }

    async fn call(&self, batch: &[Pending]) -> redis::RedisResult<(Value, u64)> {
        // Each count's kind: its step and whether it may add a key; a call's
        // counts are of a few kinds, so a scan finds them.
        let mut kinds: Vec<(GcraStep, bool)> = Vec::new();
        let mut of_count = Vec::with_capacity(batch.len());
        for Pending { step, may_add, .. } in batch {
            let kind = (*step, *may_add);
            let at = kinds.iter().position(|k| *k == kind).unwrap_or_else(|| {
                kinds.push(kind);
                kinds.len() - 1
            });
            of_count.push(at + 1);
        }
        let mut cmd = redis::Cmd::with_capacity(5 + 2 * batch.len() + 4 * kinds.len(), 0);
        cmd.arg("EVALSHA").arg(self.script.get_hash()).arg(batch.len());
        for pending in batch {
            cmd.arg(&pending.name);
        }
        cmd.arg(self.grace).arg(kinds.len());
        for (step, may_add) in &kinds {
            cmd.arg(step.interval()).arg(step.capacity()).arg(step.cost()).arg(u8::from(*may_add));
        }
        for kind in of_count {
            cmd.arg(kind);
        }
        let mut conn = if self.min_acked == 0 { self.link.conn() } else { self.link.waiting_conn() };
        call(&mut conn, &cmd, self.min_acked).await
    }

    /// Each count of `batch` with its answer from `reply`.
    fn answer(&self, batch: Vec<Pending>, reply: redis::RedisResult<(Value, u64)>) -> Vec<Answered> {
        let read = match reply {
            Ok((Value::Array(items), acked)) => {
                let mut items = items.into_iter();
                millis(items.next()).map(|now| (items, acked, now))
            }
            Ok((other, _)) => Err(unexpected(format!("the integer script answered {other:?}"))),
            Err(e) => {
                self.link.trouble(false, Some(&e));
                Err(e)
            }
        };
        let (mut items, acked, now) = match read {
            Ok(read) => read,
            Err(e) => return batch.into_iter().map(|p| (p.reply, Err(failed(e.clone())))).collect(),
        };
        let mut readonly = false;
        let answered = batch
            .into_iter()
            .map(|Pending { step, reply, .. }| {
                let answer = match items.next() {
                    Some(Value::Int(-1)) => Ok(Counted::ByUpdate),
                    Some(Value::Int(packed)) if packed >= 0 => {
                        let (status, added) = ((packed >> 1) & 3, packed & 1 == 1);
                        let counted = GcraCounted { tat: now + (packed >> 3), now, allowed: status == 1 };
                        match status {
                            2 => Ok(Counted::Full),
                            1 if step.cost() > 0 && acked < u64::from(self.min_acked) => {
                                Err(unacked(acked, self.min_acked))
                            }
                            _ => Ok(Counted::Done { counted, added }),
                        }
                    }
                    Some(Value::BulkString(error)) => {
                        let error = String::from_utf8_lossy(&error).into_owned();
                        readonly |= error.starts_with("READONLY");
                        Err(refused(error))
                    }
                    other => Err(failed(unexpected(format!("the integer script answered {other:?} for a count")))),
                };
                (reply, answer)
            })
            .collect();
        if readonly {
            self.link.trouble(true, None);
        }
        answered
    }
}
