//! What a [`LimitLayer`](super::LimitLayer)'s services share: the limit,
//! the key's extractor and what a request without one gets, the refusal's
//! body and fields; and how a counted request is answered. The layer builds
//! it and hands each service it makes one `Arc` of it, as tower_governor's
//! layer hands its services its config.

use axum::body::Body;
use axum::http::Response;
use axum::response::IntoResponse;

use super::fields::{AdmittedFields, Values};
use super::key::Key;
use super::refusal::{MissingKey, Refusal, RefusalBody};
use crate::limits::LimitHandle;
use crate::{Decision, LimitError};

/// A layer's settings and limit, shared by its services.
#[derive(Clone, Debug)]
pub(super) struct LayerConfig<K> {
    /// The limit, found by name when the layer is built.
    pub(super) handle: LimitHandle,
    pub(super) limit: String,
    pub(super) part: String,
    pub(super) extractor: K,
    pub(super) missing: MissingKey,
    pub(super) body: RefusalBody,
    /// What the key is, for the missing-key message.
    pub(super) what: String,
    /// The RateLimit fields of admitted answers; `None` when they are not sent.
    pub(super) fields: Option<AdmittedFields>,
}

/// What the layer does with a request once it is counted.
pub(super) enum Answer {
    /// To the wrapped service, with these fields on its answer (none for a
    /// request passed uncounted, or when the layer sends none on admitted
    /// ones). Boxed here, where they are made, as the future holds them.
    Pass(Option<Box<Values>>),
    /// Answered in the service's place.
    Refuse(Response<Body>),
}

impl<K> LayerConfig<K> {
    /// `key` counted on a store that answers at once; `None` when it answers
    /// only through a future (nothing is counted then). An address is
    /// handed over as the address, so its text is not parsed back.
    pub(super) fn count_now(&self, key: &Key) -> Option<Result<Decision, LimitError>> {
        match key.ip() {
            Some(ip) => self.handle.attempt_address_now(ip, 1),
            None => self.handle.attempt_now(&[(&self.part, key.as_str())], 1),
        }
    }

    /// What to do with a request the limit `counted` (`None`: it has no key).
    /// An admitted request's decision is read where the count wrote it,
    /// not moved out first.
    pub(super) fn answer(&self, counted: Option<Result<Decision, LimitError>>) -> Answer {
        if let Some(Ok(decision)) = &counted {
            if decision.allowed {
                return Answer::Pass(self.fields.as_ref().map(|f| Box::new(f.values(decision))));
            }
        }
        let limit = self.limit.as_str();
        match counted {
            Some(Ok(decision)) => {
                Refusal::of_decision(limit, 1, decision).map_or(Answer::Pass(None), |r| Answer::Refuse(self.refuse(r)))
            }
            // A value the part can't take (not an address) is no key.
            None | Some(Err(LimitError::BadValue { .. })) => match self.missing {
                MissingKey::Pass => Answer::Pass(None),
                MissingKey::Reject(status) => {
                    Answer::Refuse(self.refuse(Refusal::missing_key(limit, status, &self.what)))
                }
            },
            Some(Err(e)) => Answer::Refuse(self.refuse(Refusal::of_error(limit, &e))),
        }
    }

    fn refuse(&self, refusal: Refusal) -> Response<Body> {
        refusal.with_body(self.body.clone()).into_response()
    }
}
