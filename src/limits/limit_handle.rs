//! [`LimitHandle`]: one limit of a [`Limits`], found by its name once, for
//! a caller that counts on the same limit again and again (the
//! [layer](crate::layer)).

use std::net::IpAddr;

use super::attempt::{Attempt, Which};
use super::compiled_limit::{CompiledLimit, Given};
use super::decision::Decision;
use super::error::LimitError;
use super::handle::Limits;

/// One limit of a [`Limits`], found by its name once ([`Limits::handle`]):
/// its attempts count as [`Limits::attempt`]'s do, on the same counts, with
/// no lookup by name. Cheap to clone. It counts on the limits it came from:
/// limits built again (a reload) need a handle of their own.
#[derive(Clone)]
pub struct LimitHandle {
    limits: Limits,
    /// Where the limit is in `limits`.
    index: usize,
}

impl std::fmt::Debug for LimitHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitHandle").field("limit", &self.compiled().limit.name()).finish_non_exhaustive()
    }
}

impl Limits {
    /// A handle to limit `name`, to count on it with no lookup by name;
    /// `None` when there is no such limit.
    pub fn handle(&self, name: &str) -> Option<LimitHandle> {
        let index = self.table().position(name)?;
        Some(LimitHandle { limits: self.clone(), index })
    }
}

impl LimitHandle {
    /// [`Limits::attempt_cost`] on this limit: an attempt of `cost` (1 for
    /// one request, as [`Limits::attempt`] counts).
    pub fn attempt<'a>(&'a self, parts: &'a [(&'a str, &'a str)], cost: u64) -> Attempt<'a> {
        Attempt::new(&self.limits, Which::Found(self.compiled()), parts, cost)
    }

    /// [`attempt`](Self::attempt) answered here and now, with no
    /// future, on a store that [answers at once](crate::LimitStore::answers_at_once)
    /// (the memory store, guarded or not); `None` on a store that answers
    /// through a future, and then nothing was counted: await `attempt`
    /// instead. For a caller that answers without a future of its own (a
    /// tower service's `call`, as the [layer](crate::layer)'s), holding the
    /// handle it found once.
    ///
    /// Refused inside [`in_transaction`](crate::in_transaction).
    pub fn attempt_now(&self, parts: &[(&str, &str)], cost: u64) -> Option<Result<Decision, LimitError>> {
        self.compiled().answer_now(Given::Parts(parts), cost)
    }

    /// [`attempt_now`](Self::attempt_now) on a limit of one part, given
    /// the address `ip` of a client: counted as its network's text would be
    /// (an IPv6 client per the limits'
    /// [`ipv6_prefix`](crate::limits::LimitsBuilder::ipv6_prefix), on any
    /// part, so that a /64 is one client however its part is normalized),
    /// with no text to parse; for code that holds the address, as the
    /// layer's extractors do. A limit of more parts is
    /// [`LimitError::MissingPart`].
    pub fn attempt_address_now(&self, ip: IpAddr, cost: u64) -> Option<Result<Decision, LimitError>> {
        let compiled = self.compiled();
        let part = match compiled.only_part() {
            Ok(part) => part,
            Err(e) => return Some(Err(e)),
        };
        let answer = |normal: &str| compiled.answer_now(Given::Normal(normal), cost);
        compiled.rules.with_address(part.normalize, self.client_network(ip), answer)
    }

    /// The address a client at `ip` counts as on this limit, as
    /// [`attempt_address_now`](Self::attempt_address_now) counts it: an
    /// IPv4-mapped IPv6 address as its IPv4 address, another IPv6 address as
    /// the first address of its network (the limits'
    /// [`ipv6_prefix`](crate::limits::LimitsBuilder::ipv6_prefix)), IPv4 as
    /// it is. For a caller that holds a client's address and counts its
    /// text (on a store that answers through a future, with
    /// [`attempt`](Self::attempt)): the text of this address counts what
    /// `attempt_address_now` counts, on a part of any normalization.
    pub fn client_network(&self, ip: IpAddr) -> IpAddr {
        self.compiled().rules.client_network(ip)
    }

    fn compiled(&self) -> &CompiledLimit {
        self.limits.table().at(self.index)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::{LimitError, Limits, MemoryStore};

    /// A handle counts on the same counts as its limits, by parts or by
    /// address; a name with no limit has no handle, and an address is no
    /// value for a limit of more parts than one.
    #[tokio::test]
    async fn a_handle_counts_as_its_limits_do() {
        let limits = Limits::builder()
            .store(Arc::new(MemoryStore::new()))
            .single_instance(true)
            .budget("api", "client", 3)
            .build()
            .unwrap();
        assert!(limits.handle("no-such-limit").is_none());
        let api = limits.handle("api").unwrap();
        let ip = "192.0.2.7";
        assert_eq!(api.attempt(&[("client", ip)], 1).await.unwrap().remaining, 2);
        assert_eq!(api.attempt_now(&[("client", ip)], 1).unwrap().unwrap().remaining, 1);
        assert_eq!(api.attempt_address_now(ip.parse().unwrap(), 1).unwrap().unwrap().remaining, 0);
        assert!(!limits.attempt("api", &[("client", ip)]).await.unwrap().allowed);
        assert_eq!(limits.counters("api").map(|c| (c.allowed, c.limited)), Some((3, 1)));

        let sign_in = limits.handle("sign-in").unwrap();
        let answered = sign_in.attempt_address_now(ip.parse().unwrap(), 1).unwrap();
        assert!(matches!(answered, Err(LimitError::MissingPart { .. })), "{answered:?}");
    }
}
