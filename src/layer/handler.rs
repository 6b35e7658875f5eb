//! Limits inside a handler, where a layer can't reach: the account of a
//! sign-in is in the form, and its reset follows a right password.
//!
//! ```
//! use std::net::SocketAddr;
//! use axum::extract::{ConnectInfo, State};
//! use axum::http::StatusCode;
//! use axum::response::Response;
//! use limit_store::layer::{attempt, Refusal};
//! use limit_store::Limits;
//!
//! async fn sign_in(
//!     State(limits): State<Limits>,
//!     ConnectInfo(peer): ConnectInfo<SocketAddr>,
//!     (account, password): (String, String),
//! ) -> Result<Response, Refusal> {
//!     let ip = peer.ip().to_string();
//!     let admitted = attempt(&limits, "sign-in", &[("account", &account), ("ip", &ip)]).await?;
//!     if password != "right" {
//!         return Ok(admitted.respond(StatusCode::UNAUTHORIZED));
//!     }
//!     let _ = limits.reset("sign-in", &[("account", &account)]).await;
//!     Ok(admitted.respond("signed in"))
//! }
//! ```

use axum::response::{IntoResponse, Response};

use super::refusal::Refusal;
use crate::ratelimit_fields::{fields, RateLimitFields};
use crate::{Decision, Limits};

/// Counts one attempt on limit `limit` (as [`Limits::attempt`]): [`Admitted`]
/// when it may go ahead, else the [`Refusal`] to answer with (`?` in a
/// handler returning `Result<_, Refusal>`).
pub async fn attempt(limits: &Limits, limit: &str, parts: &[(&str, &str)]) -> Result<Admitted, Refusal> {
    let decision = limits.attempt(limit, parts).await.map_err(|e| Refusal::of_error(limit, &e))?;
    let count = limits.limit(limit).map_or(parts.len(), |l| l.parts().len());
    admit(limit, count, decision)
}

/// `decision` on `limit` (counting `parts` parts) as an admission or a refusal.
fn admit(limit: &str, parts: usize, decision: Decision) -> Result<Admitted, Refusal> {
    let fields = fields(limit, parts, &decision);
    if let Some(refusal) = Refusal::of_decision(limit, parts, decision.clone()) {
        return Err(refusal);
    }
    Ok(Admitted { fields, decision })
}

/// An attempt that may go ahead, with the RateLimit fields its answer carries.
#[derive(Debug)]
pub struct Admitted {
    fields: RateLimitFields,
    decision: Decision,
}

impl Admitted {
    /// The limit's decision.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// `response` with the RateLimit fields added.
    pub fn respond(self, response: impl IntoResponse) -> Response {
        let mut response = response.into_response();
        self.fields.write_to(response.headers_mut());
        response
    }
}
